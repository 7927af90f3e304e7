package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/callerauth/callerauth/binding"
)

// MaxRoleFileBytes bounds --role-file.
const MaxRoleFileBytes = 1 << 20

// roleFile is --role-file as written: which role each request needs, and
// which callers have each role.
type roleFile struct {
	Required []roleRequired `json:"required"`
	Grants   []roleGrant    `json:"grants"`
}

type roleRequired struct {
	// Request is "METHOD PATTERN": an HTTP method, or * for any, and a
	// path.Match pattern of the cleaned path.
	Request string `json:"request"`
	Role    string `json:"role"`
}

type roleGrant struct {
	Role            string              `json:"role"`
	Usernames       []string            `json:"usernames,omitempty"`
	Groups          []string            `json:"groups,omitempty"`
	ServiceAccounts []string            `json:"serviceAccounts,omitempty"`
	Extra           map[string][]string `json:"extra,omitempty"`
}

// Roles is a read --role-file: binding.Roles over the proxy's requests,
// each request named by the first entry of Required that matches it.
type Roles struct {
	File    string
	entries []roleEntry
	config  binding.RoleConfig
}

type roleEntry struct {
	key, method, pattern string
}

var httpToken = regexp.MustCompile(`^[A-Z]+$`)

// readRoleFile reads --role-file, refusing what could not be honoured:
// an unknown field, a request that is not METHOD PATTERN, a pattern
// path.Match cannot read, one request twice, a grant of no role or of
// nobody, and — over a backend that states no roles (every one but an
// AuthenticationConfiguration's) — a required role no grant gives, which
// no caller could ever have.
func readRoleFile(name string, backendStatesRoles bool) (*Roles, error) {
	b, err := readFlagFile("--role-file", name, MaxRoleFileBytes)
	if err != nil {
		return nil, err
	}
	var rf roleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		return nil, fmt.Errorf("proxy: --role-file %s: %w", name, err)
	}
	if len(bytes.TrimSpace(b)) == 0 || len(rf.Required) == 0 {
		return nil, fmt.Errorf("proxy: --role-file %s: no required entry: name the role each request needs", name)
	}
	r := &Roles{File: name, config: binding.RoleConfig{Required: map[string]string{}}}
	var errs []error
	for i, e := range rf.Required {
		method, pattern, ok := strings.Cut(e.Request, " ")
		_, badPattern := path.Match(pattern, "/")
		switch {
		case !ok || (method != "*" && !httpToken.MatchString(method)) || !strings.HasPrefix(pattern, "/") || strings.ContainsAny(pattern, " \t"):
			errs = append(errs, fmt.Errorf("required[%d]: request %q: want METHOD /PATH (a method such as GET, or *, and a path pattern)", i, e.Request))
			continue
		case badPattern != nil:
			errs = append(errs, fmt.Errorf("required[%d]: request %q: %w", i, e.Request, badPattern))
			continue
		case e.Role == "":
			errs = append(errs, fmt.Errorf("required[%d]: request %q names no role", i, e.Request))
			continue
		}
		if _, dup := r.config.Required[e.Request]; dup {
			errs = append(errs, fmt.Errorf("required[%d]: request %q is named twice", i, e.Request))
			continue
		}
		r.config.Required[e.Request] = e.Role
		r.entries = append(r.entries, roleEntry{key: e.Request, method: method, pattern: pattern})
	}
	for _, g := range rf.Grants {
		r.config.Grants = append(r.config.Grants, binding.RoleGrant{Role: g.Role, Usernames: g.Usernames, Groups: g.Groups, ServiceAccounts: g.ServiceAccounts, Extra: g.Extra})
	}
	if err := r.config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !backendStatesRoles {
		for _, e := range rf.Required {
			if e.Role != "" && !slices.ContainsFunc(r.config.Grants, func(g binding.RoleGrant) bool { return g.Role == e.Role }) {
				errs = append(errs, fmt.Errorf("required: role %q (for %q) is given by no grant, and the caller backend states no roles: no caller could ever have it", e.Role, e.Request))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("proxy: --role-file %s: %w", name, errors.Join(errs...))
	}
	return r, nil
}

// rule is binding.Roles over the file's entries: a request takes the key
// of the first entry that matches its method and cleaned path; one that
// none matches keeps "METHOD /path", which the table does not hold, and
// is refused role_missing.
func (r *Roles) rule() binding.Rule {
	return roleRule{Rule: binding.Roles(r.config), roles: r}
}

type roleRule struct {
	binding.Rule
	roles *Roles
}

func (rr roleRule) Check(s binding.Subject, req binding.Request) (binding.Grant, *binding.Violation) {
	method, p, _ := strings.Cut(req.Method, " ")
	for _, e := range rr.roles.entries {
		if e.method != "*" && e.method != method {
			continue
		}
		if ok, _ := path.Match(e.pattern, path.Clean(p)); ok {
			req.Method = e.key
			break
		}
	}
	return rr.Rule.Check(s, req)
}

func (rr roleRule) Needs() []binding.Need { return binding.Needs(rr.Rule) }
func (rr roleRule) Validate() error       { return binding.Validate(rr.Rule) }

// systemOf is the system a request names for --caller-binding: its
// --system-header. Named twice, the request cannot be read.
func systemOf(r *http.Request, header string) (string, error) {
	vs := r.Header.Values(header)
	if len(vs) > 1 {
		return "", fmt.Errorf("%s is given %d times; name one system", header, len(vs))
	}
	if len(vs) == 0 {
		return "", nil
	}
	return vs[0], nil
}
