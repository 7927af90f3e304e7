package layers_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/callerauth/callerauth/internal/tools/benchcompare"
	"github.com/callerauth/callerauth/internal/tools/images"
)

// budgets bound what each library package links: its non-standard
// packages, as `go list -deps` counts them (the standard library is not
// counted: it moves with Go, not with us). A new library package needs a
// budget here and a row in docs/embedding.md.
var budgets = map[string]int{
	"reason":           5,
	"token":            10,
	"bearer":           20,
	"decision":         10,
	"authn":            55,
	"authn/oidc":       70,
	"binding":          80,
	"credentials":      140,
	"devissuer":        140,
	"guard":            165,
	"authn/kube":       195,
	"authn/authconfig": 265,
	"callers":          400,
}

// heavy are what only a program reading an AuthenticationConfiguration
// (authn/authconfig, and callers, which offers it) may link: the API
// server's library, its CEL, client-go's typed clientset of every group.
var heavy = []string{"k8s.io/apiserver/", "github.com/google/cel-go/", "k8s.io/client-go/kubernetes"}

var mayLinkHeavy = []string{"authn/authconfig", "callers"}

// nonStandardDeps lists the non-standard packages pkgs link together.
func nonStandardDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return nonStandardDepsTagged(t, "", pkgs...)
}

// nonStandardDepsTagged is nonStandardDeps in a build with the tags
// given (go build -tags).
func nonStandardDepsTagged(t *testing.T, tags string, pkgs ...string) []string {
	t.Helper()
	args := []string{"list", "-deps", "-tags", tags, "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}
	for _, p := range pkgs {
		args = append(args, "../../"+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	return strings.Fields(string(out))
}

func heavyIn(deps []string) []string {
	var found []string
	for _, d := range deps {
		for _, h := range heavy {
			if strings.HasPrefix(d+"/", h) || d == strings.TrimSuffix(h, "/") {
				found = append(found, d)
			}
		}
	}
	return found
}

// TestDependencyBudget holds every library package to its budget, keeps
// the heavy packages out of all but the two that read an
// AuthenticationConfiguration, and holds docs/embedding.md's table to
// both figures.
func TestDependencyBudget(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}", "../../...").Output()
	if err != nil {
		t.Fatal(err)
	}
	var library []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" || !isLibrary(rel) {
			continue
		}
		library = append(library, rel)
	}
	doc, err := os.ReadFile("../../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\| ([0-9]+) \\| ([0-9]+) \\|$")
	stated := map[string][2]int{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		linked, _ := strconv.Atoi(m[2])
		budget, _ := strconv.Atoi(m[3])
		stated[m[1]] = [2]int{linked, budget}
	}
	for _, p := range library {
		budget, ok := budgets[p]
		if !ok {
			t.Errorf("library package %s has no dependency budget (test/layers/deps_test.go)", p)
			continue
		}
		deps := nonStandardDeps(t, p)
		if len(deps) > budget {
			t.Errorf("%s links %d non-standard packages; its budget is %d", p, len(deps), budget)
		}
		if h := heavyIn(deps); len(h) > 0 && !slices.Contains(mayLinkHeavy, p) {
			t.Errorf("%s links %s; only %s may", p, strings.Join(h, ", "), strings.Join(mayLinkHeavy, " and "))
		}
		if got, ok := stated[p]; !ok || got != [2]int{len(deps), budget} {
			t.Errorf("docs/embedding.md's row for %s: want | `%s` | %d | %d |, found %v", p, p, len(deps), budget, got)
		}
	}
	for p := range budgets {
		if !slices.Contains(library, p) {
			t.Errorf("a budget for %s, which is not a library package", p)
		}
	}
	if len(library) < 10 {
		t.Fatalf("only %d library packages found", len(library))
	}
}

// TestAGuardedServiceLinksNoAPIServer: a service built on authn,
// authn/kube, authn/oidc and guard — TokenReview, offline keys, the
// bound-object watch — links none of the heavy packages.
func TestAGuardedServiceLinksNoAPIServer(t *testing.T) {
	if h := heavyIn(nonStandardDeps(t, "authn", "authn/kube", "authn/oidc", "guard", "binding", "bearer", "credentials")); len(h) > 0 {
		t.Errorf("a guarded service links %s", strings.Join(h, ", "))
	}
}

// isLibrary reports whether rel (a package path inside the module) is a
// library package: public, and not a test helper (a ...test package).
func isLibrary(rel string) bool {
	top, _, _ := strings.Cut(rel, "/")
	return top != "internal" && top != "cmd" && top != "test" && top != "api" && top != "examples" && !strings.HasSuffix(rel, "test")
}

// binaryBudgets bound each shipped binary (an image each, make images):
// the non-standard packages it links, and its size in MiB built as the
// images build it (CGO_ENABLED=0, -trimpath, -ldflags='-s -w'). The
// sidecar that refreshes a token links what refreshing needs, nothing
// else. docs/deploy.md's "Sizes" table states each budget.
var binaryBudgets = map[string][2]int{
	"pdp":                  {530, 48},
	"platform-connector":   {500, 46},
	"vmafx-controller":     {500, 46},
	"vmafx-node":           {450, 38},
	"vmafx-operator":       {870, 58},
	"callerauth-proxy":     {510, 46},
	"callerauth-refresher": {15, 8},
	"callerauth":           {990, 68},
}

// TestBinaryBudget builds every shipped binary as the images do and holds
// it to its budget, and docs/deploy.md's table to the budgets.
func TestBinaryBudget(t *testing.T) {
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| ([0-9]+) \\| ([0-9]+) MiB \\|")
	stated := map[string][2]int{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		pkgs, _ := strconv.Atoi(m[2])
		mib, _ := strconv.Atoi(m[3])
		stated[m[1]] = [2]int{pkgs, mib}
	}
	dir := t.TempDir()
	for _, bin := range images.Binaries {
		budget, ok := binaryBudgets[bin]
		if !ok {
			t.Errorf("shipped binary %s has no budget (test/layers/deps_test.go)", bin)
			continue
		}
		if got := stated[bin]; got != budget {
			t.Errorf("docs/deploy.md's Sizes row for %s: want | `%s` | %d | %d MiB |, found %v", bin, bin, budget[0], budget[1], got)
		}
		deps := nonStandardDeps(t, "cmd/"+bin)
		out := filepath.Join(dir, bin)
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "../../cmd/"+bin)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", bin, err, b)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		mib := float64(fi.Size()) / (1 << 20)
		if len(deps) > budget[0] || mib > float64(budget[1]) {
			t.Errorf("%s links %d non-standard packages and is %.1f MiB; its budget is %d and %d MiB", bin, len(deps), mib, budget[0], budget[1])
		}
		t.Logf("%-21s %4d packages  %5.1f MiB", bin, len(deps), mib)
	}
	for bin := range binaryBudgets {
		if !slices.Contains(images.Binaries, bin) {
			t.Errorf("a budget for %s, which is not a shipped binary", bin)
		}
	}
}

// noAuthConfig is the build tag that leaves the oidc backend's
// AuthenticationConfiguration reader out (callers/authconfig_none.go).
const noAuthConfig = "callerauth_noauthconfig"

// TestProxyWithoutAuthConfig: callerauth-proxy built with the tag
// callerauth_noauthconfig links none of the heavy packages the default
// build links, still authenticates a caller by TokenReview (a dev
// issuer's), and refuses --caller-backend oidc at start-up, naming the
// tag.
func TestProxyWithoutAuthConfig(t *testing.T) {
	if h := heavyIn(nonStandardDeps(t, "cmd/callerauth-proxy")); len(h) == 0 {
		t.Fatal("the default build of callerauth-proxy links none of the heavy packages: this test would prove nothing")
	}
	if h := heavyIn(nonStandardDepsTagged(t, noAuthConfig, "cmd/callerauth-proxy")); len(h) > 0 {
		t.Errorf("callerauth-proxy built with -tags %s links %s", noAuthConfig, strings.Join(h, ", "))
	}
	dir := t.TempDir()
	bins := map[string]string{}
	for _, b := range []struct{ name, tags string }{{"callerauth-proxy", noAuthConfig}, {"bare-proxy", ""}, {"empty-server", ""}} {
		bins[b.name] = filepath.Join(dir, b.name)
		// As docs/proxy.md "A build for TokenReview only" builds it.
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-tags", b.tags, "-o", bins[b.name], "../../cmd/"+b.name)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.name, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := benchcompare.StartProxies(ctx, filepath.Join(dir, "run"), bins["callerauth-proxy"], bins["bare-proxy"], bins["empty-server"])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Through(ctx); err != nil {
		t.Error(err)
	}

	cmd := exec.CommandContext(ctx, bins["callerauth-proxy"], "--caller-backend", "oidc", "--caller-authentication-config", filepath.Join(dir, "authn.yaml"),
		"--caller-audience", "upstream", "--upstream", "http://127.0.0.1:1", "--listen", "unix://"+filepath.Join(dir, "proxy.sock"),
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"), "--allow-service-account", "ns:sa")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(string(out), "--caller-backend oidc: this binary was built without") || !strings.Contains(string(out), noAuthConfig) {
		t.Errorf("callerauth-proxy -tags %s with --caller-backend oidc: %v, want a refusal at start-up naming the tag:\n%s", noAuthConfig, err, out)
	}
}
