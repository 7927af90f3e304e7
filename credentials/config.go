package credentials

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/token"
)

// Config is a client's connection and credential settings. The zero value is
// a plaintext connection with no token, which [Config.Validate] accepts.
//
//	cfg := credentials.Config{Address: "controller.vmafx.svc:9090", TLS: true,
//		TokenFile: "/var/run/secrets/tokens/vmafx"} // re-read on every call
//	conn, err := cfg.Dial()       // gRPC; Validate runs first
//	rt, err := cfg.Transport()    // or HTTP
//
// [Load] reads the same settings from a YAML section and the environment.
type Config struct {
	// Address is the target, as grpc.NewClient takes it ("host:port",
	// "dns:///host:port", "unix:///path/to.sock"). Optional for Validate
	// unless a token is sent without TLS: then it must name a Unix socket.
	Address string
	// TLS turns on transport security. Default false. Required for sending a
	// token over TCP.
	TLS bool
	// CAFile is a PEM bundle of the CAs that may sign the server's
	// certificate. Default: the system roots. Requires TLS.
	CAFile string
	// ServerName overrides the name the server's certificate is checked
	// against. Default: the host in the address. Requires TLS.
	ServerName string
	// TokenFile is read again on every call. Exclusive with Token.
	TokenFile string
	// Token is an inline token, for tests and parity with tools that take one
	// inline. Exclusive with TokenFile. Prefer TokenFile: an inline token
	// cannot be renewed without a restart.
	Token string

	// keys names the configuration keys for messages; set by Load.
	keys *keyNames
}

// Key names, as they appear under the section.
const (
	keyAddress    = "address"
	keyTLS        = "tls"
	keyCAFile     = "ca_file"
	keyServerName = "server_name"
	keyTokenFile  = "token_file"
	keyToken      = "token"
)

var knownKeys = []string{keyAddress, keyCAFile, keyServerName, keyTLS, keyToken, keyTokenFile}

type keyNames struct {
	section string
	prefix  string
}

// name returns how a key is shown in messages: "controller.tls
// (VMAFX_CONTROLLER_TLS)" after Load, "tls" on a hand-built Config.
func (c Config) name(key string) string {
	if c.keys == nil {
		return key
	}
	n := key
	if c.keys.section != "" {
		n = c.keys.section + "." + key
	}
	if c.keys.prefix != "" {
		n += " (" + c.keys.prefix + strings.ToUpper(key) + ")"
	}
	return n
}

// LoadOption says where [Load] reads from.
type LoadOption func(*loader)

type loader struct {
	file      string
	tree      map[string]any
	prefix    string
	lookupEnv func(string) (string, bool)
}

// FromFile reads the section from a YAML (or JSON) file.
func FromFile(path string) LoadOption { return func(l *loader) { l.file = path } }

// FromTree reads the section from an already parsed configuration tree, as
// produced by unmarshalling YAML or JSON into map[string]any.
func FromTree(tree map[string]any) LoadOption { return func(l *loader) { l.tree = tree } }

// FromEnv reads environment variables named prefix + the upper-cased key
// (VMAFX_CONTROLLER_ + TOKEN_FILE). They override the file. A variable that
// is set but empty counts as unset.
func FromEnv(prefix string) LoadOption { return func(l *loader) { l.prefix = prefix } }

// WithLookupEnv replaces os.LookupEnv, for tests.
func WithLookupEnv(f func(string) (string, bool)) LoadOption {
	return func(l *loader) { l.lookupEnv = f }
}

// Load reads the client settings under section (a dotted path such as
// "controller" or "vmafx.controller") from the sources the options name,
// the environment winning over the file. Unknown keys in the section and
// values of the wrong type are errors naming the key; nothing is guessed.
// Load does not validate the combination: call [Config.Validate].
func Load(section string, opts ...LoadOption) (Config, error) {
	l := loader{lookupEnv: os.LookupEnv}
	for _, o := range opts {
		o(&l)
	}
	cfg := Config{keys: &keyNames{section: section, prefix: l.prefix}}
	where := "configuration"
	tree := l.tree
	if l.file != "" {
		where = l.file
		b, err := os.ReadFile(l.file)
		if err != nil {
			return Config{}, fmt.Errorf("credentials: %w", err)
		}
		if tree, err = readTree(b); err != nil {
			return Config{}, fmt.Errorf("credentials: parsing %s: %w", l.file, err)
		}
	}
	if err := cfg.fromTree(tree, section, where); err != nil {
		return Config{}, err
	}
	if l.prefix != "" {
		if err := cfg.fromEnv(l.prefix, l.lookupEnv); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}

// readTree reads a YAML (or JSON) file strictly: a key written twice in
// one mapping is refused (YAML would keep the last: a second "tls: false"
// would switch TLS off unseen), and the document must then be I-JSON (the
// one reader of every file callerauth reads, internal/foundation/ijson).
func readTree(b []byte) (map[string]any, error) {
	j, err := ijson.FromYAML(b)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := json.Unmarshal(j, &tree); err != nil {
		return nil, errors.New("the document is not a mapping")
	}
	return tree, nil
}

func (c *Config) fromTree(tree map[string]any, section, where string) error {
	node := any(tree)
	path := ""
	for _, part := range strings.Split(section, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return fmt.Errorf("credentials: %s in %s: want a mapping, got %s", path, where, describe(node))
		}
		node, ok = m[part]
		if !ok || node == nil {
			return nil // the section is absent: nothing from the file
		}
		path = strings.TrimPrefix(path+"."+part, ".")
	}
	m, ok := node.(map[string]any)
	if !ok {
		return fmt.Errorf("credentials: %s in %s: want a mapping, got %s", section, where, describe(node))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		v := m[k]
		if v == nil {
			continue // "key:" with no value is unset
		}
		full := section + "." + k
		switch k {
		case keyTLS:
			b, ok := v.(bool)
			if !ok {
				errs = append(errs, fmt.Errorf("credentials: %s in %s: want a boolean (true or false), got %s", full, where, describe(v)))
				continue
			}
			c.TLS = b
		case keyAddress, keyCAFile, keyServerName, keyTokenFile, keyToken:
			s, ok := v.(string)
			if !ok {
				errs = append(errs, fmt.Errorf("credentials: %s in %s: want a string, got %s", full, where, describe(v)))
				continue
			}
			*c.field(k) = s
		default:
			errs = append(errs, fmt.Errorf("credentials: %s in %s: unknown key (known keys: %s)", full, where, strings.Join(knownKeys, ", ")))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) fromEnv(prefix string, lookup func(string) (string, bool)) error {
	for _, k := range knownKeys {
		name := prefix + strings.ToUpper(k)
		v, ok := lookup(name)
		if !ok || v == "" {
			continue
		}
		if k == keyTLS {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("credentials: %s: want a boolean (true or false), got %q", name, v)
			}
			c.TLS = b
			continue
		}
		*c.field(k) = v
	}
	return nil
}

func (c *Config) field(key string) *string {
	switch key {
	case keyAddress:
		return &c.Address
	case keyCAFile:
		return &c.CAFile
	case keyServerName:
		return &c.ServerName
	case keyTokenFile:
		return &c.TokenFile
	case keyToken:
		return &c.Token
	}
	panic("credentials: no string field for key " + key)
}

// describe names a value's YAML type without echoing long or secret values.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 32 {
			return "a string"
		}
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case float64, int, int64:
		return fmt.Sprintf("number %v", v)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// IsUnixAddress reports whether a gRPC target names a Unix domain socket
// ("unix:path", "unix:///path", "unix-abstract:name").
func IsUnixAddress(addr string) bool {
	return strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:")
}

// HasToken reports whether the configuration sends a bearer token.
func (c Config) HasToken() bool { return c.Token != "" || c.TokenFile != "" }

// Validate returns every reason the configuration cannot be honoured, each
// naming its keys, joined with errors.Join; nil when it can. It refuses:
//   - token and token_file together;
//   - ca_file or server_name without tls;
//   - a token (either key) without tls, unless address is a Unix socket: a
//     bearer token never travels over plaintext TCP;
//   - a ca_file that cannot be read or holds no PEM certificate.
//
// The token file itself is not required to exist yet: a sidecar or the
// kubelet may write it after start-up. Each call names it if it is missing.
func (c Config) Validate() error {
	var errs []error
	if c.Token != "" && c.TokenFile != "" {
		errs = append(errs, fmt.Errorf("credentials: %s and %s are both set; set one", c.name(keyToken), c.name(keyTokenFile)))
	}
	if !c.TLS {
		if c.CAFile != "" {
			errs = append(errs, fmt.Errorf("credentials: %s is set but %s is false; a CA file only means something with TLS", c.name(keyCAFile), c.name(keyTLS)))
		}
		if c.ServerName != "" {
			errs = append(errs, fmt.Errorf("credentials: %s is set but %s is false; a server name only means something with TLS", c.name(keyServerName), c.name(keyTLS)))
		}
		if c.HasToken() && !IsUnixAddress(c.Address) {
			tk := keyTokenFile
			if c.TokenFile == "" {
				tk = keyToken
			}
			target := "is not set"
			if c.Address != "" {
				target = fmt.Sprintf("is %q", c.Address)
			}
			errs = append(errs, fmt.Errorf("credentials: %s sends a bearer token, which needs %s: true; only a Unix socket %s may carry it without TLS, and %s %s",
				c.name(tk), c.name(keyTLS), c.name(keyAddress), c.name(keyAddress), target))
		}
	}
	if c.TLS && c.CAFile != "" {
		if _, err := c.certPool(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c Config) certPool() (*x509.CertPool, error) {
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("credentials: %s: %w", c.name(keyCAFile), err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("credentials: %s: %q: %w", c.name(keyCAFile), c.CAFile, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("credentials: %s: %q holds no PEM certificate", c.name(keyCAFile), c.CAFile)
	}
	return pool, nil
}

// TokenSource returns the configured token source wrapped in the expiry
// check, or nil when no token is configured. The file source is read on
// every call.
func (c Config) TokenSource() token.Source {
	switch {
	case c.TokenFile != "":
		return token.CheckExpiry(token.File(c.TokenFile))
	case c.Token != "":
		return token.CheckExpiry(token.Static(c.Token))
	default:
		return nil
	}
}
