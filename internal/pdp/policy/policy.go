// Package policy loads a PDP policy package (a manifest, Cedar policies and
// a Cedar schema) and a registry snapshot (Cedar entities), validates both
// against the schema, and evaluates check requests with cedar-go.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

// Evaluator names the evaluator in decision records.
const Evaluator = "cedar-go v1.9.1"

// Reasons the evaluator itself gives.
const (
	ReasonNoPolicyMatched = "no_policy_matched"
	ReasonUnannotated     = "policy_without_reason"
)

// Package is a validated policy package.
type Package struct {
	ID       string
	Version  string
	Digest   string // sha256: over the package's files, names and contents
	policies *cedar.PolicySet
	ids      []cedar.PolicyID
	validate *validate.Validator
}

// Manifest is manifest.json.
type Manifest struct {
	PackageID     string `json:"package_id"`
	PolicyVersion string `json:"policy_version"`
}

// LoadPackage reads dir: manifest.json, *.cedar policies and one
// *.cedarschema. Every policy is validated against the schema; the first
// problem found in each file is reported, naming the file.
func LoadPackage(dir string) (*Package, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("policy: --policy-dir: %w", err)
	}
	h := sha256.New()
	var manifest Manifest
	var schemaFile string
	var policyFiles []string
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir():
		case name == "manifest.json":
		case strings.HasSuffix(name, ".cedarschema"):
			if schemaFile != "" {
				return nil, fmt.Errorf("policy: %s: more than one schema (%s, %s)", dir, schemaFile, name)
			}
			schemaFile = name
		case strings.HasSuffix(name, ".cedar"):
			policyFiles = append(policyFiles, name)
		}
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
		return b, nil
	}
	mb, err := read("manifest.json")
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(mb)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&manifest); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	if manifest.PackageID == "" || manifest.PolicyVersion == "" {
		return nil, fmt.Errorf("policy: %s: package_id and policy_version are required", filepath.Join(dir, "manifest.json"))
	}
	if schemaFile == "" {
		return nil, fmt.Errorf("policy: %s: no *.cedarschema", dir)
	}
	if len(policyFiles) == 0 {
		return nil, fmt.Errorf("policy: %s: no *.cedar policies", dir)
	}
	sb, err := read(schemaFile)
	if err != nil {
		return nil, err
	}
	var s schema.Schema
	s.SetFilename(schemaFile)
	if err := s.UnmarshalCedar(sb); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, schemaFile), err)
	}
	resolved, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, schemaFile), err)
	}
	p := &Package{ID: manifest.PackageID, Version: manifest.PolicyVersion, policies: cedar.NewPolicySet(), validate: validate.New(resolved)}
	sort.Strings(policyFiles)
	var errs []error
	for _, f := range policyFiles {
		b, err := read(f)
		if err != nil {
			return nil, err
		}
		list, err := cedar.NewPolicyListFromBytes(f, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: %s: %w", filepath.Join(dir, f), err))
			continue
		}
		for i, pol := range list {
			id := cedar.PolicyID(fmt.Sprintf("%s#%d", f, i))
			if a, ok := pol.Annotations()["id"]; ok {
				id = cedar.PolicyID(a)
			}
			if err := p.validate.Policy(string(id), (*xast.Policy)(pol.AST())); err != nil {
				errs = append(errs, fmt.Errorf("policy: %s: policy %s does not match the schema: %w", filepath.Join(dir, f), id, err))
				continue
			}
			if !p.policies.Add(id, pol) {
				errs = append(errs, fmt.Errorf("policy: %s: policy id %s is used twice", filepath.Join(dir, f), id))
			}
			p.ids = append(p.ids, id)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return p, nil
}

// Registry is a validated registry snapshot.
type Registry struct {
	Entities types.EntityMap
	Digest   string
}

// LoadRegistry reads a JSON array of Cedar entities and validates every one
// against the package's schema.
func (p *Package) LoadRegistry(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: --registry: %w", err)
	}
	var m types.EntityMap
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", path, err)
	}
	if err := p.validate.Entities(m); err != nil {
		return nil, fmt.Errorf("policy: %s does not match the schema of package %s %s: %w", path, p.ID, p.Version, err)
	}
	sum := sha256.Sum256(b)
	return &Registry{Entities: m, Digest: "sha256:" + hex.EncodeToString(sum[:])}, nil
}

// Request is a check request, as POST /v1/check takes it.
type Request struct {
	System   string   `json:"system"`
	Subject  string   `json:"subject"`
	Tenant   string   `json:"tenant"`
	Lane     string   `json:"lane"`
	Resource string   `json:"resource"`
	Stage    string   `json:"stage"`
	Fields   []string `json:"fields"`
	Purpose  string   `json:"purpose"`
}

// Decision is what the policy decided.
type Decision struct {
	Allow  bool
	Reason string
	// Policies that determined it.
	Policies []string
}

// Evaluate maps the request to Cedar (principal Subject::subject, action
// Action::stage, resource Resource::resource — in its lane and tenant as
// the registry says — and context {system, purpose, fields}) and decides.
// The reason is the determining policy's @reason annotation: the first
// forbid's when one matches, else the first permit's; with neither, deny
// with no_policy_matched.
func (p *Package) Evaluate(reg *Registry, r Request) Decision {
	fields := make([]types.Value, len(r.Fields))
	for i, f := range r.Fields {
		fields[i] = types.String(f)
	}
	req := cedar.Request{
		Principal: types.NewEntityUID("Subject", types.String(r.Subject)),
		Action:    types.NewEntityUID("Action", types.String(r.Stage)),
		Resource:  types.NewEntityUID("Resource", types.String(r.Resource)),
		Context: types.NewRecord(types.RecordMap{
			"system":  types.String(r.System),
			"purpose": types.String(r.Purpose),
			"fields":  types.NewSet(fields...),
		}),
	}
	ok, diag := cedar.Authorize(p.policies, reg.Entities, req)
	d := Decision{Allow: ok == cedar.Allow}
	reasons := diag.Reasons
	sort.Slice(reasons, func(i, j int) bool { return reasons[i].PolicyID < reasons[j].PolicyID })
	for _, r := range reasons {
		d.Policies = append(d.Policies, string(r.PolicyID))
	}
	switch {
	case len(reasons) == 0:
		d.Reason = ReasonNoPolicyMatched
	default:
		d.Reason = ReasonUnannotated
		if a, ok := p.policies.Get(reasons[0].PolicyID).Annotations()["reason"]; ok {
			d.Reason = string(a)
		}
	}
	return d
}
