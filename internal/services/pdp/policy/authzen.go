package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema/resolved"
)

// Reasons of an AuthZEN evaluation decided before any policy runs. The
// first five are denials (decision false); invalid_evaluation is an
// evaluation the PDP could not evaluate (decision false, with an error in
// the answer's context).
const (
	ReasonSubjectTypeUnknown  = "subject_type_unknown"
	ReasonResourceTypeUnknown = "resource_type_unknown"
	ReasonActionUnknown       = "action_unknown"
	ReasonInvalidEvaluation   = "invalid_evaluation"
	// ReasonSubjectUnknown and ReasonResourceUnknown (shared with the check
	// API): an entity of a registry-described type the registry lacks.
)

// AuthZENReasons are the reasons decided before policy, in the order they
// are checked.
var AuthZENReasons = []string{ReasonSubjectTypeUnknown, ReasonSubjectUnknown, ReasonResourceTypeUnknown, ReasonResourceUnknown,
	ReasonActionUnknown, ReasonInvalidEvaluation}

// Where an entity's attributes and relations come from.
const (
	AttributesRegistry = "registry" // the registry holds the entity; a request naming another is denied
	AttributesRequest  = "request"  // the request's properties are its attributes; the registry holds none
)

// AuthZENMapping maps AuthZEN types onto the schema's entity types: an
// AuthZEN subject {type, id} is the principal <entity_type>::"<id>", a
// resource likewise.
type AuthZENMapping struct {
	Subjects  map[string]EntityMapping `json:"subjects"`
	Resources map[string]EntityMapping `json:"resources"`
}

// EntityMapping is the Cedar entity type of an AuthZEN type, and where its
// attributes come from.
type EntityMapping struct {
	EntityType string `json:"entity_type"`
	Attributes string `json:"attributes"`
}

// check validates the mapping against the schema: every entity type is
// declared, every attributes source is known, and a Cedar type is
// described by one source only.
func (m *AuthZENMapping) check(s *resolved.Schema) error {
	var errs []error
	if len(m.Subjects) == 0 {
		errs = append(errs, errors.New("subjects: map at least one AuthZEN subject type"))
	}
	if len(m.Resources) == 0 {
		errs = append(errs, errors.New("resources: map at least one AuthZEN resource type"))
	}
	source := map[string]string{}
	for _, side := range []struct {
		name string
		m    map[string]EntityMapping
	}{{"subjects", m.Subjects}, {"resources", m.Resources}} {
		names := make([]string, 0, len(side.m))
		for n := range side.m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			em := side.m[n]
			if n == "" {
				errs = append(errs, fmt.Errorf("%s: an empty AuthZEN type", side.name))
			}
			if _, ok := s.Entities[types.EntityType(em.EntityType)]; !ok {
				errs = append(errs, fmt.Errorf("%s.%s: entity_type %q is not declared in the schema", side.name, n, em.EntityType))
			}
			if em.Attributes != AttributesRegistry && em.Attributes != AttributesRequest {
				errs = append(errs, fmt.Errorf("%s.%s: attributes %q: want %q or %q", side.name, n, em.Attributes, AttributesRegistry, AttributesRequest))
			}
			if prev, ok := source[em.EntityType]; ok && prev != em.Attributes {
				errs = append(errs, fmt.Errorf("%s.%s: entity type %s is described by the registry for one AuthZEN type and by the request for another", side.name, n, em.EntityType))
			}
			source[em.EntityType] = em.Attributes
		}
	}
	return errors.Join(errs...)
}

// fromRequest reports whether entities of type t take their attributes
// from the request.
func (m *AuthZENMapping) fromRequest(t types.EntityType) bool {
	for _, side := range []map[string]EntityMapping{m.Subjects, m.Resources} {
		for _, em := range side {
			if em.EntityType == string(t) && em.Attributes == AttributesRequest {
				return true
			}
		}
	}
	return false
}

// Entity is an AuthZEN subject or resource.
type Entity struct {
	Type, ID   string
	Properties json.RawMessage // an object, or nil
}

// Evaluation is one AuthZEN access evaluation request, defaults applied.
type Evaluation struct {
	Subject          Entity
	Action           string
	ActionProperties json.RawMessage // an object, or nil
	Resource         Entity
	Context          json.RawMessage // an object, or nil
}

// overlay serves the request's own entities, then the registry's.
type overlay struct {
	own  types.EntityMap
	base types.EntityMap
}

func (o overlay) Get(uid types.EntityUID) (types.Entity, bool) {
	if e, ok := o.own[uid]; ok {
		return e, true
	}
	e, ok := o.base[uid]
	return e, ok
}

// EvaluateAuthZEN decides one AuthZEN evaluation. Every member reaches the
// decision or refuses it: the subject's and resource's type select an
// entity type of the mapping (or deny, *_type_unknown) and their id names
// the entity; a registry-described entity must be in the registry
// (*_unknown) and may carry no properties, a request-described one is
// built from its properties; the action must be one the schema declares
// (action_unknown) and may carry no properties; the context is the Cedar
// context. The entities and the request are validated against the schema,
// and anything that does not match is invalid_evaluation (Decision.Invalid,
// with the member named in Detail) — never an allow.
func (p *Package) EvaluateAuthZEN(reg *Registry, e Evaluation) Decision {
	if p.authzen == nil {
		return Decision{Reason: ReasonInvalidEvaluation, Invalid: true, Detail: "the policy package does not serve AuthZEN"}
	}
	own := types.EntityMap{}
	principal, d := p.entity(reg, own, "subject", p.authzen.Subjects, e.Subject, ReasonSubjectTypeUnknown, ReasonSubjectUnknown)
	if d != nil {
		return *d
	}
	resource, d := p.entity(reg, own, "resource", p.authzen.Resources, e.Resource, ReasonResourceTypeUnknown, ReasonResourceUnknown)
	if d != nil {
		return *d
	}
	action := types.NewEntityUID(TypeAction, types.String(e.Action))
	if _, ok := p.schema.Actions[action]; !ok {
		return Decision{Reason: ReasonActionUnknown, Detail: fmt.Sprintf("action.name %q is not an action of package %s", e.Action, p.ID)}
	}
	if len(e.ActionProperties) > 0 && !bytes.Equal(bytes.TrimSpace(e.ActionProperties), []byte("{}")) {
		return invalid("action.properties: this PDP takes no action properties; send request attributes in the context")
	}
	var ctx types.Record
	if len(e.Context) > 0 {
		if err := json.Unmarshal(e.Context, &ctx); err != nil {
			return invalid("context: %v", err)
		}
	}
	req := cedar.Request{Principal: principal, Action: action, Resource: resource, Context: ctx}
	if err := p.validate.Request(types.Request(req)); err != nil {
		return invalid("the evaluation does not match the schema of package %s %s: %v", p.ID, p.Version, err)
	}
	return p.decide(overlay{own: own, base: reg.Entities}, req)
}

func invalid(format string, args ...any) Decision {
	return Decision{Reason: ReasonInvalidEvaluation, Invalid: true, Detail: fmt.Sprintf(format, args...)}
}

// entity maps an AuthZEN subject or resource onto its Cedar entity.
func (p *Package) entity(reg *Registry, own types.EntityMap, member string, m map[string]EntityMapping, e Entity, typeUnknown, unknown string) (types.EntityUID, *Decision) {
	em, ok := m[e.Type]
	if !ok {
		known := make([]string, 0, len(m))
		for t := range m {
			known = append(known, t)
		}
		sort.Strings(known)
		return types.EntityUID{}, &Decision{Reason: typeUnknown, Detail: fmt.Sprintf("%s.type %q is not one package %s maps (%s)", member, e.Type, p.ID, strings.Join(known, ", "))}
	}
	uid := types.NewEntityUID(types.EntityType(em.EntityType), types.String(e.ID))
	hasProps := len(e.Properties) > 0 && !bytes.Equal(bytes.TrimSpace(e.Properties), []byte("{}"))
	if em.Attributes == AttributesRegistry {
		if _, ok := reg.Entities[uid]; !ok {
			return uid, &Decision{Reason: unknown, Detail: fmt.Sprintf("%s %s is not in the registry", member, uid)}
		}
		if hasProps {
			d := invalid("%s.properties: the attributes of %s come from the registry; the request may not set them", member, uid)
			return uid, &d
		}
		return uid, nil
	}
	ent := types.Entity{UID: uid}
	if len(e.Properties) > 0 {
		if err := json.Unmarshal(e.Properties, &ent.Attributes); err != nil {
			d := invalid("%s.properties: %v", member, err)
			return uid, &d
		}
	}
	if err := p.validate.Entity(ent); err != nil {
		d := invalid("%s.properties do not match entity type %s of package %s: %v", member, em.EntityType, p.ID, err)
		return uid, &d
	}
	if prev, dup := own[uid]; dup && !entityEqual(prev, ent) {
		d := invalid("%s: %s is also the subject, with other properties", member, uid)
		return uid, &d
	}
	own[uid] = ent
	return uid, nil
}

func entityEqual(a, b types.Entity) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
