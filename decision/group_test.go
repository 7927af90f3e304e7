package decision_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callerauth/callerauth/decision"
)

func groupResponse(t *testing.T, g decision.GroupSigned) []byte {
	t.Helper()
	b, err := json.Marshal(decision.Signed{Record: g.Record, RootJWS: g.RootJWS, Proof: &g.Proof})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSignGroupVerifies: each record of a group verifies alone against its
// own request, and only its own; an edited record, a proof moved to
// another index, a root presented as a record and a record's JWS
// presented as a root are refused.
func TestSignGroupVerifies(t *testing.T) {
	s, err := decision.NewSigner(profile, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	opts := decision.VerifyOptions{Profile: profile, Keys: s.JWKS()}
	var recs []*decision.Record
	var reqs [][]byte
	for i := range 5 {
		req := []byte(fmt.Sprintf(`{"subject":"s%d","stage":"read"}`, i))
		reqs = append(reqs, req)
		recs = append(recs, record(t, time.Now(), req))
	}
	out, err := s.SignGroup(recs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range out {
		o := opts
		o.Request = reqs[i]
		if _, err := decision.Verify(groupResponse(t, g), o); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		o.Request = reqs[(i+1)%len(reqs)]
		if _, err := decision.Verify(groupResponse(t, g), o); !errors.Is(err, decision.ErrRequestMismatch) {
			t.Fatalf("record %d verified against another request: %v", i, err)
		}
	}
	edited := out[1]
	edited.Record = []byte(strings.Replace(string(edited.Record), `"effect":"allow"`, `"effect":"deny"`, 1))
	moved := out[1]
	moved.Proof.Index = 2
	lone := sign(t, s, record(t, time.Now(), reqs[0]))
	var direct decision.Signed
	_ = json.Unmarshal(lone, &direct)
	for name, c := range map[string]struct {
		resp []byte
		want error
	}{
		"an edited record":             {groupResponse(t, edited), decision.ErrSignature},
		"a proof moved":                {groupResponse(t, moved), decision.ErrSignature},
		"a root as a record's JWS":     {mustJSON(decision.Signed{Record: out[0].Record, RecordJWS: out[0].RootJWS}), decision.ErrSignature},
		"a record's JWS as a root":     {mustJSON(decision.Signed{Record: direct.Record, RootJWS: direct.RecordJWS, Proof: &decision.Proof{}}), decision.ErrSignature},
		"a root without its proof":     {mustJSON(decision.Signed{Record: out[0].Record, RootJWS: out[0].RootJWS}), decision.ErrUnsigned},
		"both a record JWS and a root": {mustJSON(decision.Signed{Record: direct.Record, RecordJWS: direct.RecordJWS, RootJWS: out[0].RootJWS, Proof: &out[0].Proof}), decision.ErrUnsigned},
	} {
		if _, err := decision.Verify(c.resp, opts); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", name, err, c.want)
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestGroupSharesASignature: records that arrive while a signature is
// being made share the next one (a root covering several), each verifying
// alone; a record that finds the group idle is signed alone (a tree of
// one, an empty proof).
func TestGroupSharesASignature(t *testing.T) {
	s, _ := decision.NewSigner(profile, newKey(t))
	const n = 40
	var arrived atomic.Int32
	first := make(chan struct{})
	var once sync.Once
	// The first signature is held until every record has arrived, so that
	// they wait together; the others run at once.
	now := func() time.Time {
		once.Do(func() {
			for arrived.Load() < n {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // let the last arrivals queue
			close(first)
		})
		return time.Now()
	}
	var sizes []int
	var mu sync.Mutex
	g := decision.NewGroup(s, 16, now)
	g.Observe = func(k int) { mu.Lock(); sizes = append(sizes, k); mu.Unlock() }
	out := make([]decision.GroupSigned, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived.Add(1)
			r := record(t, time.Now(), []byte(fmt.Sprintf(`{"subject":"s%d"}`, i)))
			var err error
			if out[i], err = g.Sign(r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	<-first
	roots := map[string]int{}
	for i, o := range out {
		if _, err := decision.Verify(groupResponse(t, o), decision.VerifyOptions{Profile: profile, Keys: s.JWKS(), Request: []byte(fmt.Sprintf(`{"subject":"s%d"}`, i))}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		roots[o.RootJWS]++
	}
	largest, total := 0, 0
	for _, k := range sizes {
		largest, total = max(largest, k), total+k
	}
	if total != n || largest < 2 || largest > 16 || len(roots) != len(sizes) {
		t.Errorf("groups of %v for %d records (%d roots); want every record once, a group of several, none over 16", sizes, n, len(roots))
	}
	t.Logf("%d records signed under %d roots, groups of %v", n, len(roots), sizes)
	alone, err := g.Sign(record(t, time.Now(), []byte(`{"subject":"lone"}`)))
	if err != nil || alone.Proof.Index != 0 || len(alone.Proof.Hashes) != 0 {
		t.Fatalf("a lone record: %+v %v", alone.Proof, err)
	}
	if _, err := decision.Verify(groupResponse(t, alone), decision.VerifyOptions{Profile: profile, Keys: s.JWKS()}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupThen: Then sees every group once, each record's signed form
// beside what its caller handed SignWith, and every SignWith returns only
// after its group's Then has run.
func TestGroupThen(t *testing.T) {
	s, _ := decision.NewSigner(profile, newKey(t))
	type mark struct {
		i    int
		seen atomic.Int32
		root string
	}
	g := decision.NewGroup(s, 8, nil)
	var groups atomic.Int32
	g.Then = func(signed []decision.GroupSigned, with []any) {
		groups.Add(1)
		for j, w := range with {
			if w == nil {
				continue // a record signed with Sign
			}
			m := w.(*mark)
			m.root = signed[j].RootJWS
			if !bytes.Contains(signed[j].Record, fmt.Appendf(nil, `"subject":"s%d"`, m.i)) {
				t.Errorf("record %d was handed the signed record %.120s", m.i, signed[j].Record)
			}
			m.seen.Add(1)
		}
	}
	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := record(t, time.Now(), fmt.Appendf(nil, `{"subject":"s%d"}`, i))
			if i%5 == 0 {
				if _, err := g.Sign(r); err != nil {
					t.Error(err)
				}
				return
			}
			m := &mark{i: i}
			out, err := g.SignWith(r, m)
			if err != nil {
				t.Error(err)
				return
			}
			if m.seen.Load() != 1 || m.root != out.RootJWS {
				t.Errorf("record %d returned with Then run %d times over its group (root %t)", i, m.seen.Load(), m.root == out.RootJWS)
			}
		})
	}
	wg.Wait()
	if groups.Load() == 0 {
		t.Fatal("Then never ran")
	}
}
