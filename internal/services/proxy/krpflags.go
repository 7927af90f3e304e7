package proxy

// kube-rbac-proxy's flags that callerauth-proxy does not have under the
// same name: a deployment that swaps the image keeps its arguments, and
// each such flag is either accepted with a start-up warning (it changes
// nothing that matters: klog's logging flags) or refused at start-up
// naming what to use instead — never "unknown flag".

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// krpFlag is one of kube-rbac-proxy's flags: its type as kube-rbac-proxy
// parses it, and what callerauth-proxy does with it — warn (accepted,
// no effect) or instead (refused, naming the replacement).
type krpFlag struct {
	name, typ string
	warn      string
	instead   string
}

// krpFlags are kube-rbac-proxy's flags that callerauth-proxy has not
// under the same name; docs/migrating-from-kube-rbac-proxy.md lists
// each, and TestKubeRBACProxyFlags holds the page and this list to each
// other.
var krpFlags = []krpFlag{
	// klog's flags, which kube-rbac-proxy accepts as disabled (warning)
	// or as its verbosity.
	{name: "logtostderr", typ: "bool", warn: "callerauth-proxy always logs to stderr"},
	{name: "alsologtostderr", typ: "bool", warn: "callerauth-proxy always logs to stderr"},
	{name: "add-dir-header", typ: "bool", warn: "callerauth-proxy's log lines are JSON, with no klog header"},
	{name: "skip-headers", typ: "bool", warn: "callerauth-proxy's log lines are JSON, with no klog header"},
	{name: "skip-log-headers", typ: "bool", warn: "callerauth-proxy's log lines are JSON, with no klog header"},
	{name: "one-output", typ: "bool", warn: "callerauth-proxy writes each line once, to stderr"},
	{name: "log-dir", typ: "string", warn: "callerauth-proxy writes no log files: it logs to stderr"},
	{name: "log-file", typ: "string", warn: "callerauth-proxy writes no log files: it logs to stderr"},
	{name: "log-file-max-size", typ: "uint64", warn: "callerauth-proxy writes no log files: it logs to stderr"},
	{name: "log-backtrace-at", typ: "string", warn: "callerauth-proxy logs no backtraces"},
	{name: "stderrthreshold", typ: "string", warn: "every line goes to stderr: set --log-level"},
	{name: "v", typ: "int", warn: "klog's verbosity: set --log-level (debug logs every decision's detail)"},
	{name: "vmodule", typ: "string", warn: "klog's verbosity by file: set --log-level"},
	{name: "log-flush-frequency", typ: "duration", warn: "callerauth-proxy writes each line as it comes"},
	{name: "auth-header-fields-enabled", typ: "bool", warn: "the identity headers are always set, and a client's always removed"},
	// Renamed, or not offered: refused, naming what to use.
	{name: "secure-listen-address", typ: "string", instead: "--listen"},
	{name: "insecure-listen-address", typ: "string", instead: "nothing: tokens never travel over plaintext TCP (give --listen with --tls-cert-file and --tls-key-file)"},
	{name: "upstream-force-h2c", typ: "bool", instead: "--upstream-http2"},
	{name: "upstream-client-cert-file", typ: "string", instead: "nothing: reach the upstream over a Unix socket or loopback, or have it verify the signed identity assertion (--identity-assertion-audience)"},
	{name: "upstream-client-key-file", typ: "string", instead: "nothing: reach the upstream over a Unix socket or loopback, or have it verify the signed identity assertion (--identity-assertion-audience)"},
	{name: "proxy-endpoints-port", typ: "int", instead: "--metrics-listen (/healthz, /readyz and /metrics on their own listener)"},
	{name: "tls-private-key-file", typ: "string", instead: "--tls-key-file"},
	{name: "tls-reload-interval", typ: "duration", instead: "--tls-check-interval"},
	{name: "tls-min-version", typ: "string", instead: "nothing: TLS 1.2 and up, always"},
	{name: "tls-cipher-suites", typ: "strings", instead: "nothing: Go's cipher suites, always"},
	{name: "auth-token-audiences", typ: "strings", instead: "--caller-audience (one audience, required)"},
	{name: "auth-header-user-field-name", typ: "string", instead: "--user-header"},
	{name: "auth-header-groups-field-name", typ: "string", instead: "--group-header (one header per group)"},
	{name: "auth-header-groups-field-separator", typ: "string", instead: "nothing: groups are never joined, one --group-header each"},
	{name: "oidc-issuer", typ: "string", instead: "--caller-backend oidc with --caller-authentication-config"},
	{name: "oidc-clientID", typ: "string", instead: "--caller-backend oidc with --caller-authentication-config (the audiences)"},
	{name: "oidc-groups-claim", typ: "string", instead: "--caller-authentication-config (claimMappings.groups)"},
	{name: "oidc-username-claim", typ: "string", instead: "--caller-authentication-config (claimMappings.username)"},
	{name: "oidc-groups-prefix", typ: "string", instead: "--caller-authentication-config (claimMappings.groups.prefix)"},
	{name: "oidc-sign-alg", typ: "strings", instead: "--caller-authentication-config (the issuer's JWKS names the algorithms)"},
	{name: "oidc-ca-file", typ: "string", instead: "--caller-authentication-config (issuer.certificateAuthority)"},
	{name: "kube-api-qps", typ: "float", instead: "--caller-review-qps and --authorization-qps"},
	{name: "kube-api-burst", typ: "int", instead: "--caller-review-burst and --authorization-burst"},
	{name: "http2-disable", typ: "bool", instead: "nothing: Go's HTTP/2 server, bounded by --http-max-header-bytes, --http-read-timeout and --http-write-timeout"},
	{name: "http2-max-concurrent-streams", typ: "int", instead: "nothing: Go's HTTP/2 server's limit of 250 streams a connection"},
	{name: "http2-max-size", typ: "int", instead: "nothing: Go's HTTP/2 server, headers bounded by --http-max-header-bytes"},
}

// krpValue records that its flag was given; its value is not read.
type krpValue struct {
	f     krpFlag
	given *[]krpFlag
}

func (v *krpValue) String() string { return "" }
func (v *krpValue) Type() string   { return v.f.typ }
func (v *krpValue) Set(string) error {
	if !slices.ContainsFunc(*v.given, func(g krpFlag) bool { return g.name == v.f.name }) {
		*v.given = append(*v.given, v.f)
	}
	return nil
}

// addKubeRBACProxyFlags registers kube-rbac-proxy's flags, hidden, so
// that a command line written for it parses; Complete judges them.
func addKubeRBACProxyFlags(f *pflag.FlagSet, given *[]krpFlag) {
	for _, k := range krpFlags {
		if f.Lookup(k.name) != nil {
			continue // one callerauth-proxy has under its name
		}
		short := ""
		if k.name == "v" && f.ShorthandLookup("v") == nil {
			short = "v" // klog's -v=2
		}
		f.VarP(&krpValue{f: k, given: given}, k.name, short, "kube-rbac-proxy's; see docs/migrating-from-kube-rbac-proxy.md")
		fl := f.Lookup(k.name)
		if k.typ == "bool" {
			fl.NoOptDefVal = "true"
		}
		fl.Hidden = true
	}
}

// krpMessages are the start-up warnings and refusals of the
// kube-rbac-proxy flags given.
func krpMessages(given []krpFlag) (warnings []string, errs []error) {
	for _, k := range given {
		if k.warn != "" {
			warnings = append(warnings, fmt.Sprintf("--%s is kube-rbac-proxy's and has no effect here: %s", k.name, k.warn))
			continue
		}
		use := "use " + k.instead
		if strings.HasPrefix(k.instead, "nothing") {
			use = "callerauth-proxy has " + k.instead
		}
		errs = append(errs, fmt.Errorf("proxy: --%s is kube-rbac-proxy's: %s (docs/migrating-from-kube-rbac-proxy.md)", k.name, use))
	}
	return warnings, errs
}
