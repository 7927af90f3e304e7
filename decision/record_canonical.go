package decision

import (
	"bytes"
	"strconv"
	"time"
)

// canonical writes the record's RFC 8785 canonical JSON directly — the
// members in sorted order, omitempty as encoding/json applies it, strings
// escaped as RFC 8785 says — which equals CanonicalJSON(r)
// (TestRecordCanonical, FuzzRecordCanonical) without marshalling the record
// and parsing it back, once per answer. The binding is copied as it is when
// Bind made it (canonical already), and canonicalized otherwise.
func (r *Record) canonical() ([]byte, error) {
	binding := []byte(r.Binding)
	if !r.boundByBind() {
		if len(binding) == 0 {
			binding = []byte("null")
		} else {
			c, err := Canonicalize(binding)
			if err != nil {
				return nil, err
			}
			binding = c
		}
	}
	var b bytes.Buffer
	b.Grow(1024 + len(binding))
	b.WriteString(`{"binding":`)
	b.Write(binding)
	b.WriteString(`,"caller":`)
	if err := r.Caller.writeCanonical(&b); err != nil {
		return nil, err
	}
	b.WriteString(`,"decision_id":`)
	writeString(&b, r.DecisionID)
	b.WriteString(`,"effect":`)
	writeString(&b, r.Effect)
	b.WriteString(`,"policy_version":`)
	writeString(&b, r.PolicyVersion)
	b.WriteString(`,"provenance":`)
	if err := r.Provenance.writeCanonical(&b); err != nil {
		return nil, err
	}
	b.WriteString(`,"reason":`)
	writeString(&b, r.Reason)
	b.WriteString(`,"request_digest":`)
	writeString(&b, r.RequestDigest)
	b.WriteString(`,"schema":`)
	writeString(&b, r.Schema)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// boundByBind reports whether Binding is still the canonical JSON Bind set.
func (r *Record) boundByBind() bool {
	return len(r.bound) > 0 && len(r.bound) == len(r.Binding) && &r.bound[0] == &r.Binding[0]
}

func writeTime(b *bytes.Buffer, t time.Time) error {
	// Quoted RFC 3339 as MarshalJSON writes it (the same checks: a year
	// outside 0-9999 is an error), nothing to escape, no allocation.
	var buf [64]byte
	out, err := t.AppendText(append(buf[:0], '"'))
	if err != nil {
		return err
	}
	b.Write(append(out, '"'))
	return nil
}

func (p Provenance) writeCanonical(b *bytes.Buffer) error {
	b.WriteString(`{"decided_at":`)
	if err := writeTime(b, p.DecidedAt); err != nil {
		return err
	}
	b.WriteString(`,"evaluator":`)
	writeString(b, p.Evaluator)
	b.WriteString(`,"mode":`)
	writeString(b, p.Mode)
	b.WriteString(`,"policy_package_digest":`)
	writeString(b, p.PolicyPackageDigest)
	b.WriteString(`,"policy_package_id":`)
	writeString(b, p.PolicyPackageID)
	b.WriteString(`,"registry_snapshot_digest":`)
	writeString(b, p.RegistrySnapshotDigest)
	b.WriteByte('}')
	return nil
}

func (c Caller) writeCanonical(b *bytes.Buffer) error {
	b.WriteByte('{')
	if len(c.Audiences) > 0 {
		b.WriteString(`"audiences":[`)
		for i, a := range c.Audiences {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, a)
		}
		b.WriteString(`],`)
	}
	b.WriteString(`"authenticated":`)
	if c.Authenticated {
		b.WriteString("true")
	} else {
		b.WriteString("false")
	}
	opt := func(name, v string) {
		if v != "" {
			b.WriteString(`,"` + name + `":`)
			writeString(b, v)
		}
	}
	opt("authenticated_by", c.AuthenticatedBy)
	opt("credential_id", c.CredentialID)
	opt("pod_name", c.PodName)
	opt("pod_uid", c.PodUID)
	opt("principal", c.Principal)
	opt("reason", c.Reason)
	for _, t := range []struct {
		name string
		at   *time.Time
	}{{"token_expires_at", c.TokenExpiresAt}, {"token_issued_at", c.TokenIssuedAt}} {
		if t.at != nil {
			b.WriteString(`,"` + t.name + `":`)
			if err := writeTime(b, *t.at); err != nil {
				return err
			}
		}
	}
	opt("uid", c.UID)
	b.WriteByte('}')
	return nil
}

// canonical writes the evaluation record's canonical JSON directly, as
// Record.canonical does (TestEvaluationRecordCanonical).
func (r *EvaluationRecord) canonical() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(1024)
	b.WriteString(`{"caller":`)
	if err := r.Caller.writeCanonical(&b); err != nil {
		return nil, err
	}
	b.WriteString(`,"decision_id":`)
	writeString(&b, r.DecisionID)
	b.WriteString(`,"endpoint":`)
	writeString(&b, r.Endpoint)
	b.WriteString(`,"evaluations":`)
	b.WriteString(strconv.Itoa(r.Evaluations))
	b.WriteString(`,"ignored":`)
	writeStrings(&b, r.Ignored)
	b.WriteString(`,"merkle_root":`)
	writeString(&b, r.MerkleRoot)
	b.WriteString(`,"policy_version":`)
	writeString(&b, r.PolicyVersion)
	b.WriteString(`,"provenance":`)
	if err := r.Provenance.writeCanonical(&b); err != nil {
		return nil, err
	}
	b.WriteString(`,"request_id":`)
	writeString(&b, r.RequestID)
	b.WriteString(`,"requested":`)
	b.WriteString(strconv.Itoa(r.Requested))
	b.WriteString(`,"schema":`)
	writeString(&b, r.Schema)
	b.WriteString(`,"semantic":`)
	writeString(&b, r.Semantic)
	b.WriteByte('}')
	return b.Bytes(), nil
}
