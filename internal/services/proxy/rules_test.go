package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/callerauth/callerauth/callers"
	"github.com/callerauth/callerauth/internal/services/proxy"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRoles: --role-file over TokenReview, which states no roles — the
// grants give them: a request takes the first entry matching its method
// and path; a caller without the role, and a request no entry names, are
// refused role_missing before the upstream.
func TestRoles(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.AllowServiceAccounts = nil
	o.RoleFile = writeFile(t, "roles.yaml", `required:
- request: GET /metrics
  role: metrics-reader
- request: "* /admin/*"
  role: admin
grants:
- role: metrics-reader
  serviceAccounts: ["demo:*"]
- role: admin
  serviceAccounts: ["demo:client"]
`)
	_, addr := run(t, o)
	base := "https://" + addr
	for _, c := range []struct {
		who, path string
		code      int
		reason    string
	}{
		{"client", "/metrics", http.StatusOK, ""},
		{"intruder", "/metrics", http.StatusOK, ""}, // demo:* has metrics-reader
		{"client", "/admin/users", http.StatusOK, ""},
		{"intruder", "/admin/users", http.StatusForbidden, "role_missing"},
		{"client", "/other", http.StatusForbidden, "role_missing"}, // no entry names it
		{"client", "/metrics/", http.StatusOK, ""},                 // matched as /metrics, as --allow-paths matches
		{"client", "/admin", http.StatusForbidden, "role_missing"},
		{"client", "/metrics/x", http.StatusForbidden, "role_missing"},
	} {
		before := reached.Load()
		code, body := e.get(t, base+c.path, e.tokens[c.who])
		if code != c.code || !strings.Contains(body, c.reason) {
			t.Errorf("%s GET %s: %d %s, want %d %s", c.who, c.path, code, body, c.code, c.reason)
		}
		if passed := reached.Load() > before; passed != (c.code == http.StatusOK) {
			t.Errorf("%s GET %s: reached the upstream %v", c.who, c.path, passed)
		}
	}
}

// TestSystemBinding: --caller-binding — a request naming a system in
// --system-header is let through from its one principal only; no system,
// an unbound one or the header twice are refused.
func TestSystemBinding(t *testing.T) {
	e := newEnv(t)
	var reached atomic.Int64
	up := httptest.NewServer(echoUpstream(&reached))
	t.Cleanup(up.Close)
	o := e.options(t, up.URL)
	o.AllowServiceAccounts = nil
	o.CallerBindings = []string{"billing=system:serviceaccount:demo:client", "search=system:serviceaccount:demo:intruder"}
	_, addr := run(t, o)
	base := "https://" + addr
	for _, c := range []struct {
		who     string
		systems []string
		code    int
		reason  string
	}{
		{"client", []string{"billing"}, http.StatusOK, ""},
		{"intruder", []string{"search"}, http.StatusOK, ""},
		{"intruder", []string{"billing"}, http.StatusForbidden, "principal_cannot_represent_system"},
		{"client", nil, http.StatusForbidden, "principal_cannot_represent_system"},
		{"client", []string{"unbound"}, http.StatusForbidden, "principal_cannot_represent_system"},
		{"client", []string{"billing", "search"}, http.StatusBadRequest, "bad_request"},
	} {
		var h []string
		for _, s := range c.systems {
			h = append(h, proxy.DefaultSystemHeader, s)
		}
		before := reached.Load()
		code, body := e.get(t, base+"/hello", e.tokens[c.who], h...)
		if code != c.code || !strings.Contains(body, c.reason) {
			t.Errorf("%s naming %q: %d %s, want %d %s", c.who, c.systems, code, body, c.code, c.reason)
		}
		if passed := reached.Load() > before; passed != (c.code == http.StatusOK) {
			t.Errorf("%s naming %q: reached the upstream %v", c.who, c.systems, passed)
		}
	}
}

// TestRuleOptionsRefused: what --role-file, --caller-binding and
// --system-header cannot honour stops the proxy at start-up, naming it.
func TestRuleOptionsRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		edit func(t *testing.T, o *proxy.Options)
		want string
	}{
		{"a role no grant gives, over TokenReview", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET /metrics, role: reader}\n")
		}, `role "reader" (for "GET /metrics") is given by no grant`},
		{"an unknown field", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET /metrics, role: reader}\ngrant: []\n")
		}, `unknown field "grant"`},
		{"a request without a path", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET, role: r}\ngrants:\n- {role: r, groups: [g]}\n")
		}, "want METHOD /PATH"},
		{"a bad pattern", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: \"GET /[\", role: r}\ngrants:\n- {role: r, groups: [g]}\n")
		}, "syntax error in pattern"},
		{"a request twice", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET /a, role: r}\n- {request: GET /a, role: s}\ngrants:\n- {role: r, groups: [g]}\n- {role: s, groups: [g]}\n")
		}, "named twice"},
		{"a grant of nobody", func(t *testing.T, o *proxy.Options) {
			o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET /a, role: r}\ngrants:\n- {role: r}\n")
		}, "names no caller"},
		{"an empty file", func(t *testing.T, o *proxy.Options) { o.RoleFile = writeFile(t, "r.yaml", "") }, "no required entry"},
		{"a missing file", func(t *testing.T, o *proxy.Options) { o.RoleFile = filepath.Join(t.TempDir(), "none.yaml") }, "--role-file"},
		{"a binding without =", func(_ *testing.T, o *proxy.Options) { o.CallerBindings = []string{"billing"} }, `--caller-binding "billing": want SYSTEM=PRINCIPAL`},
		{"a system bound twice", func(_ *testing.T, o *proxy.Options) {
			o.CallerBindings = []string{"a=system:serviceaccount:demo:x", "a=system:serviceaccount:demo:y"}
		}, "bound twice"},
		{"the system in the user header", func(_ *testing.T, o *proxy.Options) {
			o.CallerBindings, o.SystemHeader = []string{"a=system:serviceaccount:demo:x"}, "x-remote-user"
		}, "--system-header"},
		{"a system header without bindings", func(_ *testing.T, o *proxy.Options) { o.SystemHeader = "X-System" }, "give --caller-binding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := e.options(t, "http://127.0.0.1:1")
			o.AllowServiceAccounts = nil
			c.edit(t, &o)
			_, err := o.Complete()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Complete: %v, want an error containing %q", err, c.want)
			}
		})
	}
	// Over an AuthenticationConfiguration, whose mappings may state roles,
	// a role no grant gives is the token's to state.
	o := e.options(t, "http://127.0.0.1:1")
	o.AllowServiceAccounts = nil
	o.Callers.Backend = callers.BackendOIDC
	o.RoleFile = writeFile(t, "r.yaml", "required:\n- {request: GET /metrics, role: reader}\n")
	if _, err := o.Complete(); err != nil && strings.Contains(err.Error(), "--role-file") {
		t.Errorf("a role stated by the token, over oidc: %v", err)
	}
}

// TestDocumentedRoleFile holds docs/proxy.md's --role-file to the
// proxy's reader.
func TestDocumentedRoleFile(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "## callerauth's own rules")
	_, block, ok2 := strings.Cut(after, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/proxy.md has no yaml block under \"callerauth's own rules\"")
	}
	e := newEnv(t)
	o := e.options(t, "http://127.0.0.1:1")
	o.AllowServiceAccounts = nil
	o.RoleFile = writeFile(t, "roles.yaml", block)
	if _, err := o.Complete(); err != nil {
		t.Errorf("docs/proxy.md's role file: %v", err)
	}
}
