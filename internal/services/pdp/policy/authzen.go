package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema/resolved"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
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
	// AttributesRegistry: the registry holds the entity and its attributes;
	// a request naming another is denied, and its properties are ignored
	// (listed as ignored).
	AttributesRegistry = "registry"
	// AttributesRequest: the request's properties are its attributes; the
	// registry holds none.
	AttributesRequest = "request"
	// AttributesRegistryAndRequest: the registry holds the entity (a request
	// naming another is denied); the properties the schema declares replace
	// the registry's attributes of the same name. The package trusts its
	// callers to describe the entity.
	AttributesRegistryAndRequest = "registry_and_request"
)

// AuthZENMapping maps AuthZEN types onto the schema's entity types: an
// AuthZEN subject {type, id} is the principal <entity_type>::"<id>", a
// resource likewise.
type AuthZENMapping struct {
	Subjects  map[string]EntityMapping `json:"subjects"`
	Resources map[string]EntityMapping `json:"resources"`
	// ActionProperties names the context attribute that carries an
	// AuthZEN action's properties (Cedar actions have no attributes): an
	// action whose context declares it as a record receives them there;
	// empty, or an action that does not declare it, and they are ignored.
	ActionProperties string `json:"action_properties,omitempty"`
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
			if em.Attributes != AttributesRegistry && em.Attributes != AttributesRequest && em.Attributes != AttributesRegistryAndRequest {
				errs = append(errs, fmt.Errorf("%s.%s: attributes %q: want %q, %q or %q", side.name, n, em.Attributes, AttributesRegistry, AttributesRequest, AttributesRegistryAndRequest))
			}
			if prev, ok := source[em.EntityType]; ok && prev != em.Attributes {
				errs = append(errs, fmt.Errorf("%s.%s: entity type %s is described as %q for one AuthZEN type and as %q for another", side.name, n, em.EntityType, prev, em.Attributes))
			}
			source[em.EntityType] = em.Attributes
		}
	}
	if name := m.ActionProperties; name != "" {
		declared := false
		for uid, a := range s.Actions {
			if a.AppliesTo == nil {
				continue
			}
			if at, ok := a.AppliesTo.Context[types.String(name)]; ok {
				if _, rec := at.Type.(resolved.RecordType); !rec {
					errs = append(errs, fmt.Errorf("action_properties: the context of %s declares %s, but not as a record", uid, name))
				}
				declared = true
			}
		}
		if !declared {
			errs = append(errs, fmt.Errorf("action_properties: no action's context declares %q", name))
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
	// Shared are the members taken from the request's defaults, the same
	// for every evaluation of a batch that takes them: a [Batch] converts
	// each once.
	Shared Members
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

// EvaluateAuthZEN decides one AuthZEN evaluation. The subject's and
// resource's type select an entity type of the mapping (or deny,
// *_type_unknown) and their id names the entity; a registry-described
// entity must be in the registry (*_unknown). Properties, action
// properties and context reach Cedar where the package's schema declares
// them — an entity type's attributes, the action's context, and the
// context attribute named by action_properties — and are ignored (listed
// in Decision.Ignored, never a deny by themselves) where it does not, or
// where the registry describes the entity. What reaches Cedar is
// validated against the schema, and anything that does not match (a
// wrong type, a required attribute missing) is invalid_evaluation
// (Decision.Invalid, the member named in Detail) — never an allow.
func (p *Package) EvaluateAuthZEN(reg *Registry, e Evaluation) Decision {
	return p.NewBatch(reg).EvaluateAuthZEN(e)
}

// Members names members of an [Evaluation].
type Members uint8

// The members of an evaluation.
const (
	MemberSubject Members = 1 << iota
	MemberAction
	MemberResource
	MemberContext
)

// Batch decides the evaluations of one request against one snapshot of
// the package and the registry. A member an evaluation takes from the
// request's defaults (Evaluation.Shared) is converted once for the whole
// batch — its properties pruned, decoded and validated — however many
// evaluations inherit it: a batch costs what its bytes hold, not items ×
// the default's size. Not safe for concurrent use.
type Batch struct {
	p        *Package
	reg      *Registry
	entities map[string]*convertedEntity  // "subject", "resource": a shared member's
	contexts map[string]*convertedContext // a shared context's, by action name
	props    map[string]*convertedProps   // shared action properties, by action name
}

// NewBatch starts a batch of evaluations against reg.
func (p *Package) NewBatch(reg *Registry) *Batch {
	return &Batch{p: p, reg: reg}
}

// remember keeps v under k in *m, made on first use (a single evaluation,
// or one that shares nothing, makes none).
func remember[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// EvaluateAuthZEN decides one evaluation of the batch, as
// [Package.EvaluateAuthZEN] does: [Batch.Prepare], then [Batch.Decide].
func (b *Batch) EvaluateAuthZEN(e Evaluation) Decision {
	pr := b.Prepare(e)
	d := b.Decide(&pr)
	d.Ignored = pr.Ignored
	return d
}

// Prepared is an evaluation read against the package's schema and the
// registry, not yet decided: what reaches Cedar, and what was ignored on
// the way. A caller that bounds what evaluations may ignore prepares
// every evaluation of a request first, counts their Ignored, and decides
// none once the bound is passed: a refusal costs the reading, never a
// policy evaluation.
type Prepared struct {
	// Ignored are the members the evaluation does not read, by path, as
	// Decision.Ignored lists them.
	Ignored []string
	d       *Decision // decided already: a type, an entity, a member that cannot be read
	own     types.EntityMap
	req     cedar.Request
}

// Prepare reads one evaluation of the batch: the members the policy
// reads converted (a shared one once for the batch), the rest listed.
func (b *Batch) Prepare(e Evaluation) Prepared {
	var pr Prepared
	if b.p.authzen == nil {
		pr.d = &Decision{Reason: ReasonInvalidEvaluation, Invalid: true, Detail: "the policy package does not serve AuthZEN"}
		return pr
	}
	pr.own = types.EntityMap{}
	pr.d = b.prepare(e, &pr)
	return pr
}

// Decide decides a prepared evaluation.
func (b *Batch) Decide(pr *Prepared) Decision {
	if pr.d != nil {
		return *pr.d
	}
	if err := b.p.validate.Request(types.Request(pr.req)); err != nil {
		return invalid("the evaluation does not match the schema of package %s %s: %v", b.p.ID, b.p.Version, err)
	}
	return b.p.decide(overlay{own: pr.own, base: b.reg.Entities}, pr.req)
}

// prepare converts e into pr, or says why it is decided without Cedar.
func (b *Batch) prepare(e Evaluation, pr *Prepared) *Decision {
	p := b.p
	own, ignored := pr.own, &pr.Ignored
	principal, d := b.entity(own, ignored, "subject", e.Shared&MemberSubject != 0, p.authzen.Subjects, e.Subject, ReasonSubjectTypeUnknown, ReasonSubjectUnknown)
	if d != nil {
		return d
	}
	resource, d := b.entity(own, ignored, "resource", e.Shared&MemberResource != 0, p.authzen.Resources, e.Resource, ReasonResourceTypeUnknown, ReasonResourceUnknown)
	if d != nil {
		return d
	}
	action := types.NewEntityUID(TypeAction, types.String(e.Action))
	act, ok := p.schema.Actions[action]
	if !ok {
		return &Decision{Reason: ReasonActionUnknown, Detail: fmt.Sprintf("action.name %q is not an action of package %s", e.Action, p.ID)}
	}
	var shape resolved.RecordType
	if act.AppliesTo != nil {
		shape = act.AppliesTo.Context
	}
	// The action's properties go to the context attribute the mapping
	// names, when this action's context declares it as a record.
	apName := types.String(p.authzen.ActionProperties)
	apShape, apDeclared := resolved.RecordType(nil), false
	if at, ok := shape[apName]; ok && apName != "" {
		apShape, apDeclared = at.Type.(resolved.RecordType)
	}
	if apDeclared {
		shape = maps.Clone(shape)
		delete(shape, apName) // the request's own context.<name> is not it
	}
	c := b.context(e, shape)
	*ignored = append(*ignored, c.ignored...)
	if c.d != nil {
		return c.d
	}
	var ap *convertedProps
	if len(e.ActionProperties) > 0 || apDeclared {
		if !apDeclared {
			apShape = nil // every member ignored
		}
		ap = b.actionProperties(e, apName, apShape, apDeclared)
		*ignored = append(*ignored, ap.ignored...)
		if ap.d != nil {
			return ap.d
		}
	}
	if c.missing != "" {
		d := invalid("%s is required by action %s of package %s", c.missing, e.Action, p.ID)
		return &d
	}
	cedarCtx := c.record
	if apDeclared {
		merged := make(types.RecordMap, cedarCtx.Len()+1)
		for k, v := range cedarCtx.All() {
			merged[k] = v
		}
		merged[apName] = ap.value
		cedarCtx = types.NewRecord(merged)
	}
	pr.req = cedar.Request{Principal: principal, Action: action, Resource: resource, Context: cedarCtx}
	return nil
}

// convertedContext is an evaluation's context as Cedar reads it, less the
// action's properties: the declared members decoded, the first required
// one missing, what was ignored, or why it cannot be read.
type convertedContext struct {
	record  types.Record
	missing string
	ignored []string
	d       *Decision
}

// context converts e's context against shape (the action's, less the
// action properties' attribute), once per action for a shared context.
func (b *Batch) context(e Evaluation, shape resolved.RecordType) *convertedContext {
	shared := e.Shared&MemberContext != 0
	if shared {
		if c, ok := b.contexts[e.Action]; ok {
			return c
		}
	}
	c := &convertedContext{}
	if shared {
		remember(&b.contexts, e.Action, c)
	}
	ctx, whole, err := prune(e.Context, shape, "context", &c.ignored)
	if err != nil {
		d := invalid("%v", err)
		c.d = &d
		return c
	}
	c.missing = missingRequired(ctx, shape, "context")
	if ctx != nil {
		raw := json.RawMessage(e.Context) // every member kept: read as sent
		if !whole {
			raw = marshalMembers(ctx)
		}
		if err := json.Unmarshal(raw, &c.record); err != nil {
			d := invalid("context: %v", err)
			c.d = &d
		}
	}
	return c
}

// convertedProps are an evaluation's action properties as the context
// attribute apName holds them.
type convertedProps struct {
	value   types.Value
	ignored []string
	d       *Decision
}

// actionProperties converts e's action properties against shape, once
// per action for shared ones.
func (b *Batch) actionProperties(e Evaluation, apName types.String, shape resolved.RecordType, declared bool) *convertedProps {
	shared := e.Shared&MemberAction != 0
	if shared {
		if c, ok := b.props[e.Action]; ok {
			return c
		}
	}
	c := &convertedProps{}
	if shared {
		remember(&b.props, e.Action, c)
	}
	props, _, err := prune(e.ActionProperties, shape, "action.properties", &c.ignored)
	if err != nil {
		d := invalid("%v", err)
		c.d = &d
		return c
	}
	if !declared {
		return c
	}
	var rec types.Record
	if err := json.Unmarshal(marshalMembers(map[string]json.RawMessage{string(apName): marshalMembers(props)}), &rec); err != nil {
		d := invalid("context: %v", err)
		c.d = &d
		return c
	}
	c.value, _ = rec.Get(apName)
	return c
}

// prune keeps the members of a JSON object that shape declares (nested
// records pruned likewise) and lists the rest, and the nulls, in ignored
// by path; a nil shape keeps none. v nil or null: no object (nil). whole:
// nothing was dropped, so v itself is what was kept.
func prune(v json.RawMessage, shape resolved.RecordType, path string, ignored *[]string) (kept map[string]json.RawMessage, whole bool, err error) {
	if len(v) == 0 || string(v) == "null" {
		return nil, false, nil
	}
	kept = map[string]json.RawMessage{}
	whole = true
	err = ijson.Members(v, func(name, value []byte) error {
		at, declared := shape[types.String(name)]
		member := path + "." + string(name)
		switch {
		case !declared || string(value) == "null":
			*ignored = append(*ignored, member)
			whole = false
		default:
			if rt, ok := at.Type.(resolved.RecordType); ok && len(value) > 0 && value[0] == '{' {
				inner, innerWhole, err := prune(value, rt, member, ignored)
				if err != nil {
					return err
				}
				if !innerWhole {
					value, whole = marshalMembers(inner), false
				}
			}
			kept[string(name)] = value
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("%s must be a JSON object", path)
	}
	return kept, whole, nil
}

// missingRequired names the first attribute shape requires that kept
// lacks (in name order), by path; "" when none is missing. Nested records
// present are checked likewise.
func missingRequired(kept map[string]json.RawMessage, shape resolved.RecordType, path string) string {
	// No sort on the way (it would run for every evaluation): the first
	// missing attribute in name order is kept as the others are seen.
	first, found := "", ""
	for n, at := range shape {
		name := string(n)
		if found != "" && name > first {
			continue
		}
		missing := ""
		if v, ok := kept[name]; !ok {
			if !at.Optional {
				missing = path + "." + name
			}
		} else if rt, isRec := at.Type.(resolved.RecordType); isRec && len(v) > 0 && v[0] == '{' {
			var inner map[string]json.RawMessage
			if json.Unmarshal(v, &inner) == nil {
				missing = missingRequired(inner, rt, path+"."+name)
			}
		}
		if missing != "" {
			first, found = name, missing
		}
	}
	return found
}

// marshalMembers writes members as a JSON object (the values are JSON
// already); nil is {}.
func marshalMembers(m map[string]json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return json.RawMessage("{}")
	}
	b, _ := json.Marshal(m) // values came from a checked document
	return b
}

func invalid(format string, args ...any) Decision {
	return Decision{Reason: ReasonInvalidEvaluation, Invalid: true, Detail: fmt.Sprintf(format, args...)}
}

// convertedEntity is an AuthZEN subject or resource as its Cedar entity:
// the entity the request describes (keep), or the registry's as it is,
// what was ignored, or why it is refused.
type convertedEntity struct {
	uid     types.EntityUID
	ent     types.Entity
	keep    bool
	ignored []string
	d       *Decision
}

// entity maps an AuthZEN subject or resource onto its Cedar entity, once
// for a shared member, and adds it to the request's own entities.
func (b *Batch) entity(own types.EntityMap, ignored *[]string, member string, shared bool, m map[string]EntityMapping, e Entity, typeUnknown, unknown string) (types.EntityUID, *Decision) {
	c, ok := b.entities[member]
	if !shared || !ok {
		c = b.p.convertEntity(b.reg, member, m, e, typeUnknown, unknown)
		if shared {
			remember(&b.entities, member, c)
		}
	}
	*ignored = append(*ignored, c.ignored...)
	if c.d != nil || !c.keep {
		return c.uid, c.d
	}
	if prev, dup := own[c.uid]; dup && !entityEqual(prev, c.ent) {
		d := invalid("%s: %s is also the subject, with other properties", member, c.uid)
		return c.uid, &d
	}
	own[c.uid] = c.ent
	return c.uid, nil
}

// convertEntity maps an AuthZEN subject or resource onto its Cedar
// entity: its properties pruned to what the schema declares, decoded and
// validated.
func (p *Package) convertEntity(reg *Registry, member string, m map[string]EntityMapping, e Entity, typeUnknown, unknown string) *convertedEntity {
	c := &convertedEntity{}
	fail := func(d Decision) *convertedEntity {
		c.d = &d
		return c
	}
	em, ok := m[e.Type]
	if !ok {
		known := make([]string, 0, len(m))
		for t := range m {
			known = append(known, t)
		}
		sort.Strings(known)
		return fail(Decision{Reason: typeUnknown, Detail: fmt.Sprintf("%s.type %q is not one package %s maps (%s)", member, e.Type, p.ID, strings.Join(known, ", "))})
	}
	c.uid = types.NewEntityUID(types.EntityType(em.EntityType), types.String(e.ID))
	var shape resolved.RecordType
	if em.Attributes != AttributesRegistry {
		shape = p.schema.Entities[c.uid.Type].Shape
	}
	props, whole, err := prune(e.Properties, shape, member+".properties", &c.ignored)
	if err != nil {
		return fail(invalid("%v", err))
	}
	if em.Attributes == AttributesRequest {
		if missing := missingRequired(props, shape, member+".properties"); missing != "" {
			return fail(invalid("%s is required by entity type %s of package %s", missing, em.EntityType, p.ID))
		}
	}
	ent := types.Entity{UID: c.uid}
	if em.Attributes != AttributesRequest {
		base, ok := reg.Entities[c.uid]
		if !ok {
			return fail(Decision{Reason: unknown, Detail: fmt.Sprintf("%s %s is not in the registry", member, c.uid)})
		}
		if len(props) == 0 {
			return c // the registry's entity, as it is
		}
		ent = base
	}
	if len(props) > 0 {
		var attrs types.Record
		raw := e.Properties // every member kept: read as sent
		if !whole {
			raw = marshalMembers(props)
		}
		if err := json.Unmarshal(raw, &attrs); err != nil {
			return fail(invalid("%s.properties: %v", member, err))
		}
		merged := types.RecordMap{}
		for k, v := range ent.Attributes.All() {
			merged[k] = v
		}
		for k, v := range attrs.All() {
			merged[k] = v
		}
		ent.Attributes = types.NewRecord(merged)
	}
	if err := p.validate.Entity(ent); err != nil {
		return fail(invalid("%s.properties do not match entity type %s of package %s: %v", member, em.EntityType, p.ID, err))
	}
	c.ent, c.keep = ent, true
	return c
}

func entityEqual(a, b types.Entity) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// SearchCandidates are the ids an AuthZEN search for entities of AuthZEN
// type typ considers, sorted: the registry's entities of the entity type
// the mapping gives it (side "subject" or "resource"). An unmapped type,
// or one whose entities each request describes, has none.
func (p *Package) SearchCandidates(reg *Registry, side, typ string) []string {
	if p.authzen == nil {
		return nil
	}
	m := p.authzen.Subjects
	if side == "resource" {
		m = p.authzen.Resources
	}
	em, ok := m[typ]
	if !ok || em.Attributes == AttributesRequest {
		return nil
	}
	return reg.IDs(types.EntityType(em.EntityType))
}

// SearchActions are the names of the actions an AuthZEN action search
// considers, sorted: those the schema applies to the entity types the
// subject's and the resource's AuthZEN types map onto.
func (p *Package) SearchActions(subjectType, resourceType string) []string {
	if p.authzen == nil {
		return nil
	}
	sm, ok1 := p.authzen.Subjects[subjectType]
	rm, ok2 := p.authzen.Resources[resourceType]
	if !ok1 || !ok2 {
		return nil
	}
	var names []string
	for uid, a := range p.schema.Actions {
		if a.AppliesTo == nil || uid.Type != TypeAction {
			continue
		}
		if slices.Contains(a.AppliesTo.Principals, types.EntityType(sm.EntityType)) && slices.Contains(a.AppliesTo.Resources, types.EntityType(rm.EntityType)) {
			names = append(names, string(uid.ID))
		}
	}
	sort.Strings(names)
	return names
}
