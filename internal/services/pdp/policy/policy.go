// Package policy loads a PDP policy package (a manifest, Cedar policies and
// a Cedar schema) and a registry snapshot (Cedar entities), validates both
// against the schema, and evaluates check requests with cedar-go.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/resolved"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"github.com/callerauth/callerauth/decision"
	"github.com/callerauth/callerauth/internal/foundation/ijson"
)

// Evaluator names the evaluator in decision records.
const Evaluator = "cedar-go v1.9.1"

// Reasons the evaluator itself gives.
const (
	ReasonNoPolicyMatched = "no_policy_matched"
	ReasonUnannotated     = "policy_without_reason"
)

// Reasons for a request that names something the registry does not hold, or
// relations it does not record. They are decided before any policy runs:
// every field a record binds is either checked against the registry here or
// handed to the policies, so a record never vouches for a tenant, lane,
// subject or resource nothing looked at.
const (
	ReasonTenantUnknown     = "tenant_unknown"
	ReasonLaneUnknown       = "lane_unknown"
	ReasonLaneNotInTenant   = "lane_not_in_tenant"
	ReasonSubjectUnknown    = "subject_unknown"
	ReasonResourceUnknown   = "resource_unknown"
	ReasonResourceNotInLane = "resource_not_in_lane"
	ReasonStageUnknown      = "stage_unknown"
)

// RegistryReasons are the reasons decided against the registry, in the
// order they are checked.
var RegistryReasons = []string{ReasonTenantUnknown, ReasonLaneUnknown, ReasonLaneNotInTenant,
	ReasonSubjectUnknown, ReasonResourceUnknown, ReasonResourceNotInLane, ReasonStageUnknown}

// The entity types a check request maps onto; a package's schema declares
// all four.
const (
	TypeTenant   = "Tenant"
	TypeLane     = "Lane"
	TypeSubject  = "Subject"
	TypeResource = "Resource"
	TypeAction   = "Action"
)

// The APIs a package serves.
const (
	APICheck   = "check"   // POST /v1/check (the default)
	APIAuthZEN = "authzen" // the AuthZEN Authorization API
)

// Package is a validated policy package.
type Package struct {
	ID      string
	Version string
	Digest  string // sha256: over the package's files, names and contents
	// API is the API the package's schema describes: APICheck or
	// APIAuthZEN.
	API      string
	authzen  *AuthZENMapping
	policies *cedar.PolicySet
	ids      []cedar.PolicyID
	validate *validate.Validator
	schema   *resolved.Schema
}

// Manifest is manifest.json.
type Manifest struct {
	PackageID     string `json:"package_id"`
	PolicyVersion string `json:"policy_version"`
	// API is "check" (the default) or "authzen".
	API string `json:"api,omitempty"`
	// AuthZEN maps AuthZEN subject and resource types onto the schema's
	// entity types; required with api "authzen", refused otherwise.
	AuthZEN *AuthZENMapping `json:"authzen,omitempty"`
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
	if err := ijson.Decode(mb, &manifest); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	if manifest.PackageID == "" || manifest.PolicyVersion == "" {
		return nil, fmt.Errorf("policy: %s: package_id and policy_version are required", filepath.Join(dir, "manifest.json"))
	}
	switch manifest.API {
	case "", APICheck:
		manifest.API = APICheck
		if manifest.AuthZEN != nil {
			return nil, fmt.Errorf("policy: %s: an authzen mapping needs \"api\": \"authzen\"", filepath.Join(dir, "manifest.json"))
		}
	case APIAuthZEN:
		if manifest.AuthZEN == nil {
			return nil, fmt.Errorf("policy: %s: api authzen needs an authzen mapping of subject and resource types", filepath.Join(dir, "manifest.json"))
		}
	default:
		return nil, fmt.Errorf("policy: %s: api %q: want %q or %q", filepath.Join(dir, "manifest.json"), manifest.API, APICheck, APIAuthZEN)
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
	res, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, schemaFile), err)
	}
	if manifest.API == APICheck {
		if err := checkSchema(res); err != nil {
			return nil, fmt.Errorf("policy: %s: %w", filepath.Join(dir, schemaFile), err)
		}
	} else if err := manifest.AuthZEN.check(res); err != nil {
		return nil, fmt.Errorf("policy: %s: authzen: %w", filepath.Join(dir, "manifest.json"), err)
	}
	p := &Package{ID: manifest.PackageID, Version: manifest.PolicyVersion, API: manifest.API, authzen: manifest.AuthZEN,
		policies: cedar.NewPolicySet(), validate: validate.New(res), schema: res}
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

// contextAttrs is the context every check hands to the policies, by name
// and the type the schema must give it.
type contextAttr struct {
	name string
	typ  resolved.IsType
	decl string
}

var contextAttrs = []contextAttr{
	{"system", resolved.StringType{}, "system: String"},
	{"purpose", resolved.StringType{}, "purpose: String"},
	{"fields", resolved.SetType{Element: resolved.StringType{}}, "fields: Set<String>"},
	{"tenant", resolved.EntityType(TypeTenant), "tenant: Tenant"},
	{"lane", resolved.EntityType(TypeLane), "lane: Lane"},
}

// checkSchema insists that the schema can describe every check request:
// the four entity types, and for every action a context with exactly the
// members the PDP passes, so that no request field reaches a policy the
// schema does not know of, and none is dropped on the way.
func checkSchema(s *resolved.Schema) error {
	var errs []error
	for _, et := range []string{TypeTenant, TypeLane, TypeSubject, TypeResource} {
		if _, ok := s.Entities[types.EntityType(et)]; !ok {
			errs = append(errs, fmt.Errorf("entity type %s is not declared; a check request names a %s", et, strings.ToLower(et)))
		}
	}
	if len(s.Actions) == 0 {
		errs = append(errs, errors.New("no action is declared; a check request's stage is an action"))
	}
	uids := make([]types.EntityUID, 0, len(s.Actions))
	for uid := range s.Actions {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i].String() < uids[j].String() })
	for _, uid := range uids {
		a := s.Actions[uid]
		if a.AppliesTo == nil {
			errs = append(errs, fmt.Errorf("action %s applies to nothing; declare appliesTo { principal: Subject, resource: Resource, context: ... }", uid.ID))
			continue
		}
		if !slices.Contains(a.AppliesTo.Principals, types.EntityType(TypeSubject)) || !slices.Contains(a.AppliesTo.Resources, types.EntityType(TypeResource)) {
			errs = append(errs, fmt.Errorf("action %s must apply to principal Subject and resource Resource", uid.ID))
		}
		for _, want := range contextAttrs {
			got, ok := a.AppliesTo.Context[types.String(want.name)]
			if !ok || got.Optional || !reflect.DeepEqual(got.Type, want.typ) {
				errs = append(errs, fmt.Errorf("action %s: the context must declare %s (the PDP passes the request's %s to every policy)", uid.ID, want.decl, want.name))
			}
		}
		for name := range a.AppliesTo.Context {
			if !slices.ContainsFunc(contextAttrs, func(c contextAttr) bool { return c.name == string(name) }) {
				errs = append(errs, fmt.Errorf("action %s: context member %s is not one the PDP passes", uid.ID, name))
			}
		}
	}
	return errors.Join(errs...)
}

// Registry is a validated registry snapshot.
type Registry struct {
	Entities types.EntityMap
	Digest   string
	// byType lists each entity type's ids, sorted: the candidates of an
	// AuthZEN search.
	byType map[types.EntityType][]string
}

// IDs are the ids of the registry's entities of type t, sorted.
func (reg *Registry) IDs(t types.EntityType) []string { return reg.byType[t] }

// LoadRegistry reads a JSON array of Cedar entities and validates every one
// against the package's schema.
func (p *Package) LoadRegistry(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: --registry: %w", err)
	}
	if err := ijson.Check(b); err != nil {
		return nil, fmt.Errorf("policy: %s: %w", path, err)
	}
	var list []types.Entity
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("policy: %s: want a JSON array of Cedar entities: %w", path, err)
	}
	m := make(types.EntityMap, len(list))
	var errs []error
	for i, e := range list {
		if _, dup := m[e.UID]; dup {
			errs = append(errs, fmt.Errorf("policy: %s: entity %d, %s, is listed twice", path, i, e.UID))
			continue
		}
		m[e.UID] = e
		if p.authzen != nil && p.authzen.fromRequest(e.UID.Type) {
			errs = append(errs, fmt.Errorf("policy: %s: entity %d, %s: %s entities are described by each request's properties (manifest authzen attributes \"request\"), not by the registry", path, i, e.UID, e.UID.Type))
			continue
		}
		if err := p.validate.Entity(e); err != nil {
			errs = append(errs, fmt.Errorf("policy: %s: entity %d, %s, does not match the schema of package %s %s: %w", path, i, e.UID, p.ID, p.Version, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	byType := map[types.EntityType][]string{}
	for uid := range m {
		byType[uid.Type] = append(byType[uid.Type], string(uid.ID))
	}
	for _, ids := range byType {
		sort.Strings(ids)
	}
	return &Registry{Entities: m, Digest: "sha256:" + hex.EncodeToString(sum[:]), byType: byType}, nil
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

// Canonical is the request's RFC 8785 canonical JSON, written directly:
// the members in sorted order. It equals decision.CanonicalJSON(r)
// (TestRequestCanonical).
func (r Request) Canonical() []byte {
	var b bytes.Buffer
	b.Grow(256)
	b.WriteString(`{"fields":`)
	if r.Fields == nil {
		b.WriteString("null") // as encoding/json writes a nil slice
	} else {
		b.WriteByte('[')
		for i, f := range r.Fields {
			if i > 0 {
				b.WriteByte(',')
			}
			decision.WriteString(&b, f)
		}
		b.WriteByte(']')
	}
	for _, m := range []struct{ name, v string }{{"lane", r.Lane}, {"purpose", r.Purpose}, {"resource", r.Resource},
		{"stage", r.Stage}, {"subject", r.Subject}, {"system", r.System}, {"tenant", r.Tenant}} {
		b.WriteString(`,"` + m.name + `":`)
		decision.WriteString(&b, m.v)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Decision is what the policy decided.
type Decision struct {
	Allow  bool
	Reason string
	// Detail explains a registry refusal or an invalid evaluation.
	Detail string
	// Invalid: the PDP could not evaluate the request as the schema
	// describes it (AuthZEN's invalid_evaluation). Never an allow.
	Invalid bool
	// Policies that determined it.
	Policies []string
	// Ignored are the members of an AuthZEN evaluation the decision did not
	// read, by path (subject.properties.nickname, context.time): not
	// declared by the package's schema, null, or properties of an entity
	// whose attributes come from the registry.
	Ignored []string
}

// CedarRequest maps a check request to Cedar: principal Subject::subject,
// action Action::stage, resource Resource::resource, and context {system,
// purpose, fields, tenant: Tenant::tenant, lane: Lane::lane}. Every field of
// the check request is in it.
func CedarRequest(r Request) cedar.Request {
	fields := make([]types.Value, len(r.Fields))
	for i, f := range r.Fields {
		fields[i] = types.String(f)
	}
	return cedar.Request{
		Principal: types.NewEntityUID(TypeSubject, types.String(r.Subject)),
		Action:    types.NewEntityUID(TypeAction, types.String(r.Stage)),
		Resource:  types.NewEntityUID(TypeResource, types.String(r.Resource)),
		Context: types.NewRecord(types.RecordMap{
			"system":  types.String(r.System),
			"purpose": types.String(r.Purpose),
			"fields":  types.NewSet(fields...),
			"tenant":  types.NewEntityUID(TypeTenant, types.String(r.Tenant)),
			"lane":    types.NewEntityUID(TypeLane, types.String(r.Lane)),
		}),
	}
}

// Relations checks what the request names against the registry, which is
// the source of truth for entity relations: the tenant, the lane, the
// subject and the resource exist, the lane belongs to the tenant and the
// resource to the lane, and the stage is an action of the schema. It
// returns "" or the first failing check's reason (in [RegistryReasons]
// order) with a sentence for the log.
func (p *Package) Relations(reg *Registry, r Request) (reason, detail string) {
	tenant := types.NewEntityUID(TypeTenant, types.String(r.Tenant))
	lane := types.NewEntityUID(TypeLane, types.String(r.Lane))
	subject := types.NewEntityUID(TypeSubject, types.String(r.Subject))
	resource := types.NewEntityUID(TypeResource, types.String(r.Resource))
	_, hasTenant := reg.Entities[tenant]
	_, hasLane := reg.Entities[lane]
	_, hasSubject := reg.Entities[subject]
	_, hasResource := reg.Entities[resource]
	switch {
	case !hasTenant:
		return ReasonTenantUnknown, fmt.Sprintf("tenant %q is not in the registry", r.Tenant)
	case !hasLane:
		return ReasonLaneUnknown, fmt.Sprintf("lane %q is not in the registry", r.Lane)
	case !reg.in(lane, tenant):
		return ReasonLaneNotInTenant, fmt.Sprintf("lane %q does not belong to tenant %q", r.Lane, r.Tenant)
	case !hasSubject:
		return ReasonSubjectUnknown, fmt.Sprintf("subject %q is not in the registry", r.Subject)
	case !hasResource:
		return ReasonResourceUnknown, fmt.Sprintf("resource %q is not in the registry", r.Resource)
	case !reg.in(resource, lane):
		return ReasonResourceNotInLane, fmt.Sprintf("resource %q is not in lane %q", r.Resource, r.Lane)
	}
	if _, ok := p.schema.Actions[types.NewEntityUID(TypeAction, types.String(r.Stage))]; !ok {
		return ReasonStageUnknown, fmt.Sprintf("stage %q is not an action of package %s", r.Stage, p.ID)
	}
	return "", ""
}

// in reports whether child is ancestor itself or has it among its
// ancestors, transitively, as Cedar's `in` does.
func (reg *Registry) in(child, ancestor types.EntityUID) bool {
	seen := map[types.EntityUID]bool{}
	queue := []types.EntityUID{child}
	for len(queue) > 0 {
		e := queue[0]
		queue = queue[1:]
		if e == ancestor {
			return true
		}
		if seen[e] {
			continue
		}
		seen[e] = true
		if ent, ok := reg.Entities[e]; ok {
			for parent := range ent.Parents.All() {
				queue = append(queue, parent)
			}
		}
	}
	return false
}

// Evaluate decides a check request. First the registry relations
// ([Package.Relations]): a request naming what the registry does not hold,
// or relations it does not record, is denied with that reason before any
// policy runs. Then the request as [CedarRequest] maps it is authorized
// against the policies. The reason is the determining policy's @reason
// annotation: the first forbid's when one matches, else the first
// permit's; with neither, deny with no_policy_matched.
func (p *Package) Evaluate(reg *Registry, r Request) Decision {
	if reason, detail := p.Relations(reg, r); reason != "" {
		return Decision{Reason: reason, Detail: detail}
	}
	req := CedarRequest(r)
	if err := p.validate.Request(types.Request(req)); err != nil {
		// checkSchema makes this unreachable for the request shape the PDP
		// builds; should it ever happen, nothing unvalidated is allowed.
		return Decision{Reason: ReasonStageUnknown, Detail: err.Error()}
	}
	return p.decide(reg.Entities, req)
}

// decide authorizes a validated request. The reason is the determining
// policy's @reason annotation: the first forbid's when one matches, else
// the first permit's; with neither, deny with no_policy_matched.
func (p *Package) decide(entities types.EntityGetter, req cedar.Request) Decision {
	ok, diag := cedar.Authorize(p.policies, entities, req)
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
