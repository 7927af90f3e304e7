package decision

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A group-signed response carries its record, a JWS over the root of a
// Merkle tree whose leaves are the records signed together (RFC 9162
// hashing, as AuthZEN batches), and the record's inclusion proof:
//
//	{"record": {...}, "root_jws": "<compact JWS>", "proof": {"index": 3, "hashes": ["<base64url>", …]}}
//
// The root's payload is a [Root]; its JWS typ and schema are the record
// profile's [Profile.Root]. A record signed alone is a tree of one leaf,
// with an empty proof.

// Root is what a group signature signs: the Merkle root of the records'
// canonical JSON, how many there are, and when it was signed. It reveals
// nothing of the other records but their count and a hash.
type Root struct {
	Schema     string    `json:"schema"`
	MerkleRoot string    `json:"merkle_root"` // "sha256:" + hex
	Records    int       `json:"records"`
	SignedAt   time.Time `json:"signed_at"`
}

// canonical is the root's canonical JSON (CanonicalJSON's, written
// directly: one root is made per signature).
func (r Root) canonical() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(160 + len(r.Schema))
	b.WriteString(`{"merkle_root":`)
	writeString(&b, r.MerkleRoot)
	b.WriteString(`,"records":`)
	b.WriteString(strconv.Itoa(r.Records))
	b.WriteString(`,"schema":`)
	writeString(&b, r.Schema)
	b.WriteString(`,"signed_at":`)
	if err := writeTime(&b, r.SignedAt); err != nil {
		return nil, err
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Proof is a group-signed record's place in its tree.
type Proof struct {
	Index  int      `json:"index"`
	Hashes []string `json:"hashes"` // base64url SHA-256, leaf to root
}

// Root is the profile of the roots that sign records of profile p
// together: schema p.Schema + ".root", typ p.Type with "-root" before
// "+jwt" — so that a root is never taken for a record, nor a record for a
// root.
func (p Profile) Root() Profile {
	return Profile{Schema: p.Schema + ".root", Type: strings.TrimSuffix(p.Type, "+jwt") + "-root+jwt"}
}

// SignGroup signs records together: one signature over the Merkle root of
// their canonical JSON. It completes each record (its schema) and returns,
// for each, its canonical JSON, the root's JWS and its proof.
func (s *Signer) SignGroup(records []*Record, now time.Time) ([]GroupSigned, error) {
	payloads := make([][]byte, len(records))
	for i, r := range records {
		r.Schema = s.profile.Schema
		p, err := r.canonical()
		if err != nil {
			return nil, err
		}
		payloads[i] = p
	}
	return s.signRoot(payloads, now)
}

// signRoot signs payloads — records' canonical JSON, of any of the
// signer's profiles — together: one signature over the Merkle root of
// their leaf hashes. It returns, for each, the payload, the root's JWS
// and its proof.
func (s *Signer) signRoot(payloads [][]byte, now time.Time) ([]GroupSigned, error) {
	if len(payloads) == 0 {
		return nil, errors.New("decision: no record to sign")
	}
	hashes := make([][sha256.Size]byte, len(payloads))
	for i, p := range payloads {
		hashes[i] = leafHash(p)
	}
	t := newTree(hashes)
	root := t.hash(0, len(hashes))
	payload, err := Root{Schema: s.rootSchema, MerkleRoot: digestString(root), Records: len(payloads), SignedAt: now.UTC()}.canonical()
	if err != nil {
		return nil, err
	}
	compact, err := s.sign(s.rootHeader, payload)
	if err != nil {
		return nil, err
	}
	out := make([]GroupSigned, len(payloads))
	for i, payload := range payloads {
		path := t.proof(i, 0, len(hashes))
		p := Proof{Index: i, Hashes: make([]string, len(path))}
		for j, h := range path {
			p.Hashes[j] = base64url(h[:])
		}
		out[i] = GroupSigned{Record: payload, RootJWS: compact, Proof: p, Records: len(payloads)}
	}
	return out, nil
}

// GroupSigned is one record of a group: its canonical JSON, the root's
// JWS and its proof.
type GroupSigned struct {
	Record  []byte
	RootJWS string
	Proof   Proof
	// Records is how many records the root signature covers (not part of
	// the answer: what a span or a metric says of the group).
	Records int `json:"-"`
}

// Group signs records in groups: a record that arrives while a signature
// is being made waits for the next one, which covers every record waiting
// then (at most Max). The records are of its signer's profile: /v1/check
// records ([Group.Sign]) or AuthZEN evaluation records
// ([Group.SignEvaluations]). An idle group signs each record alone; no record
// waits longer than one signature behind another. The first record to find
// no signature under way signs; when its signature is done, the next
// waiting record takes over, so no goroutine outlives its request.
type Group struct {
	signer *Signer
	max    int
	now    func() time.Time
	// Observe, when set, is told each group's size.
	Observe func(n int)
	// Then, when set, is given each group once it is signed and before
	// any of its records' Sign returns: the signed records and, in the
	// same order, what their callers handed SignWith (nil from Sign). It
	// runs on the goroutine that signed the group, while the next group
	// gathers; what it must tell a caller it records in that caller's
	// value. It is not called for a group whose signing failed; if it
	// panics, every record of its group gets an error and the group
	// signs on. A
	// decision log that every answer waits for keeps a whole group in
	// one commit this way, rather than each answer waiting its turn
	// again after its signature.
	Then func(signed []GroupSigned, with []any)

	mu      sync.Mutex
	signing bool
	queue   []*pending
}

type pending struct {
	payload []byte // the record's canonical JSON
	with    any    // what SignWith was handed, for Then
	out     GroupSigned
	err     error
	wake    chan bool // true: lead the next group; false: signed
}

// NewGroup signs with signer, at most max records per root (at least 1).
func NewGroup(signer *Signer, max int, now func() time.Time) *Group {
	if max < 1 {
		max = 1
	}
	if now == nil {
		now = time.Now
	}
	return &Group{signer: signer, max: max, now: now}
}

// signBatch signs batch's records under one root and hands them to Then.
// A panic (in Then, or in signing) fails the batch rather than leaving
// its records and every later one waiting for a leader that is gone.
func (g *Group) signBatch(batch []*pending) (out []GroupSigned, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("decision: signing a group of %d records: panic: %v", len(batch), r)
		}
	}()
	payloads := make([][]byte, len(batch))
	for i, b := range batch {
		payloads[i] = b.payload
	}
	out, err = g.signer.signRoot(payloads, g.now())
	if g.Observe != nil {
		g.Observe(len(batch))
	}
	if err == nil && g.Then != nil {
		with := make([]any, len(batch))
		for i, b := range batch {
			with[i] = b.with
		}
		g.Then(out, with)
	}
	return out, err
}

// Sign signs r with whatever records are waiting with it.
func (g *Group) Sign(r *Record) (GroupSigned, error) { return g.SignWith(r, nil) }

// SignWith signs r as Sign does, handing with to Then beside r's signed
// form.
func (g *Group) SignWith(r *Record, with any) (GroupSigned, error) {
	r.Schema = g.signer.profile.Schema
	payload, err := r.canonical()
	if err != nil {
		return GroupSigned{}, err
	}
	return g.sign(payload, with)
}

// sign signs one record's canonical JSON with whatever records are
// waiting with it.
func (g *Group) sign(payload []byte, with any) (GroupSigned, error) {
	p := &pending{payload: payload, with: with, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, p)
	if g.signing {
		g.mu.Unlock()
		if lead := <-p.wake; !lead {
			return p.out, p.err
		}
		g.mu.Lock()
	}
	g.signing = true
	n := min(len(g.queue), g.max)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	out, err := g.signBatch(batch)
	for i, b := range batch {
		if err != nil {
			b.err = err
		} else {
			b.out = out[i]
		}
		if b != p {
			b.wake <- false
		}
	}
	// Hand the lead to the first record waiting, if any.
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].wake <- true
	} else {
		g.signing = false
	}
	g.mu.Unlock()
	return p.out, p.err
}
