package translog_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/translog"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
)

const origin = "pdp.test.example/decisions"

// empty is a service's own (empty) migrations: the log brings its own.
var empty = fstest.MapFS{"sqlite/00001_none.sql": {Data: []byte("-- +goose Up\nSELECT 1;\n")}, "postgres/00001_none.sql": {Data: []byte("-- +goose Up\nSELECT 1;\n")}}

func newKey(t *testing.T) (skey, vkey string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	return skey, vkey
}

// dialects runs f on an SQLite file and on a PostgreSQL database.
func dialects(t *testing.T, f func(t *testing.T, target string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, filepath.Join(t.TempDir(), "log.db")) })
	t.Run("postgres", func(t *testing.T) { f(t, pgtest.Start(t).NewDatabase(t)) })
}

func open(t *testing.T, target, skey string, now func() time.Time) (*translog.Log, *datastore.DB) {
	t.Helper()
	db, err := datastore.Open(context.Background(), "svc", target, empty, datastore.Options{SQLitePageSize: translog.SQLitePageSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	l, err := translog.Open(context.Background(), translog.Config{DB: db, Origin: origin, Key: skey, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return l, db
}

func entry(i int, at time.Time) translog.Entry {
	return translog.Entry{Data: fmt.Appendf(nil, `{"n":%d,"caller":"system:serviceaccount:ns:c%d"}`, i, i%3), At: at,
		Caller: fmt.Sprintf("system:serviceaccount:ns:c%d", i%3), System: "secrets-engine", Tenant: "t1", Reason: "", Allowed: i%2 == 0}
}

// appendN appends n entries from index from in batches of varied sizes.
func appendN(t *testing.T, l *translog.Log, from, n int, at time.Time) {
	t.Helper()
	sizes := []int{1, 7, 256, 3, 100, 1}
	for i, k := from, 0; i < from+n; k++ {
		b := min(sizes[k%len(sizes)], from+n-i)
		var es []translog.Entry
		for j := range b {
			es = append(es, entry(i+j, at))
		}
		first, err := l.Append(context.Background(), es...)
		if err != nil {
			t.Fatal(err)
		}
		if first != int64(i) {
			t.Fatalf("a batch appended at %d, want %d", first, i)
		}
		i += b
	}
}

// checkpoint opens a signed checkpoint with x/mod's note verifier and
// reads its text as C2SP tlog-checkpoint lays it out.
func checkpoint(t *testing.T, signed []byte, vkey string) (int64, tlog.Hash) {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		t.Fatalf("the checkpoint does not verify: %v\n%s", err, signed)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) != 4 || lines[0] != origin || lines[3] != "" {
		t.Fatalf("checkpoint text %q: want origin, size, root", n.Text)
	}
	var size int64
	if _, err := fmt.Sscanf(lines[1], "%d", &size); err != nil {
		t.Fatal(err)
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		t.Fatal(err)
	}
	return size, root
}

func TestProofsVerifyWithXMod(t *testing.T) {
	dialects(t, func(t *testing.T, target string) {
		ctx := context.Background()
		skey, vkey := newKey(t)
		l, _ := open(t, target, skey, nil)
		if l.VerifierKey() != vkey {
			t.Fatalf("VerifierKey %q, want note.GenerateKey's %q", l.VerifierKey(), vkey)
		}
		now := time.Now()
		appendN(t, l, 0, 700, now)
		c1, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		size1, root1 := checkpoint(t, c1.Note, vkey)
		if size1 != 700 || root1 != c1.Root {
			t.Fatalf("checkpoint of size %d root %v; Sign said %d %v", size1, root1, c1.Size, c1.Root)
		}
		appendN(t, l, 700, 333, now)
		c2, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		size2, root2 := checkpoint(t, c2.Note, vkey)
		if size2 != 1033 {
			t.Fatalf("size %d, want 1033", size2)
		}
		for _, i := range []int64{0, 1, 255, 256, 511, 699, 700, 1024, 1032} {
			e, err := l.Get(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			if want := entry(int(i), now); !bytes.Equal(e.Data, want.Data) || e.Caller != want.Caller || e.Allowed != want.Allowed {
				t.Fatalf("entry %d read back as %+v", i, e)
			}
			p, err := l.ProveEntry(ctx, i, size2)
			if err != nil {
				t.Fatal(err)
			}
			if err := tlog.CheckRecord(p, size2, root2, i, tlog.RecordHash(e.Data)); err != nil {
				t.Errorf("entry %d in the tree of %d: %v", i, size2, err)
			}
			if err := tlog.CheckRecord(p, size2, root2, i, tlog.RecordHash(append(e.Data, ' '))); err == nil {
				t.Errorf("entry %d altered by one byte still proves", i)
			}
		}
		p, err := l.ProveTree(ctx, size2, size1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckTree(p, size2, root2, size1, root1); err != nil {
			t.Errorf("the tree of %d is not proved a prefix of %d: %v", size1, size2, err)
		}
		if err := tlog.CheckTree(p, size2, root2, size1, root2); err == nil {
			t.Error("a wrong old root proves consistent")
		}
	})
}

// tiles is a tlog.TileReader over a log's tlog-tiles HTTP API, writing
// the paths as C2SP tlog-tiles spells them, independently of the log.
type tiles struct {
	t    *testing.T
	base string
}

func c2spPath(tile tlog.Tile) string {
	n := fmt.Sprintf("%03d", tile.N%1000)
	for x := tile.N / 1000; x > 0; x /= 1000 {
		n = fmt.Sprintf("x%03d/%s", x%1000, n)
	}
	l := fmt.Sprint(tile.L)
	if tile.L == -1 {
		l = "entries"
	}
	p := "tile/" + l + "/" + n
	if tile.W != 256 {
		p += fmt.Sprintf(".p/%d", tile.W)
	}
	return p
}

func (r tiles) get(path string, gz bool) ([]byte, int) {
	req, _ := http.NewRequest(http.MethodGet, r.base+"/"+path, nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(resp.Body)
		if err != nil {
			r.t.Fatal(err)
		}
		body = z
	}
	b, err := io.ReadAll(body)
	if err != nil {
		r.t.Fatal(err)
	}
	return b, resp.StatusCode
}

func (r tiles) Height() int { return 8 }
func (r tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	var out [][]byte
	for _, tile := range ts {
		b, status := r.get(c2spPath(tile), false)
		if status != http.StatusOK {
			return nil, fmt.Errorf("%s: %d %s", c2spPath(tile), status, b)
		}
		out = append(out, b)
	}
	return out, nil
}
func (r tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func TestTilesServeXModsClient(t *testing.T) {
	dialects(t, func(t *testing.T, target string) {
		ctx := context.Background()
		skey, vkey := newKey(t)
		l, db := open(t, target, skey, nil)
		appendN(t, l, 0, 70000/100, time.Now()) // 2 full tiles and a partial one at level 0
		if _, err := l.Sign(ctx); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(http.StripPrefix("/log", l.Handler()))
		defer srv.Close()
		r := tiles{t, srv.URL + "/log"}
		signed, status := r.get("checkpoint", false)
		if status != http.StatusOK {
			t.Fatalf("GET checkpoint: %d %s", status, signed)
		}
		size, root := checkpoint(t, signed, vkey)
		// x/mod's client reads hashes from the tiles and checks each tile
		// against the signed root before trusting it.
		hr := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, r)
		for _, i := range []int64{0, 255, 256, 600, size - 1} {
			p, err := tlog.ProveRecord(size, i, hr)
			if err != nil {
				t.Fatalf("entry %d through the tiles: %v", i, err)
			}
			bundle, status := r.get(c2spPath(tlog.Tile{H: 8, L: -1, N: i / 256, W: int(min(256, size-i/256*256))}), true)
			if status != http.StatusOK {
				t.Fatalf("entry bundle of %d: %d %s", i, status, bundle)
			}
			data := bundleEntry(t, bundle, int(i%256))
			if err := tlog.CheckRecord(p, size, root, i, tlog.RecordHash(data)); err != nil {
				t.Errorf("entry %d from its bundle: %v", i, err)
			}
		}
		// What tlog-tiles does not serve: past the end, empty or
		// non-canonical paths, writes.
		for _, path := range []string{"tile/0/003", "tile/0/002.p/189", "tile/0/000.p/0", "tile/0/000.p/256", "tile/0/0", "tile/0/x000/000",
			"tile/1/000", "tile/entries/003", "tile/data/000", "tile/8/0/000", "tile/64/000", "tile/00/000", "checkpoints", "tile/0/000/"} {
			if b, status := r.get(path, false); status != http.StatusNotFound {
				t.Errorf("GET %s: %d %.80q, want 404", path, status, b)
			}
		}
		for _, path := range []string{"tile/0/000", "tile/0/002.p/188", "tile/1/000.p/2", "tile/entries/002.p/188"} {
			if b, status := r.get(path, false); status != http.StatusOK {
				t.Errorf("GET %s: %d %.80q, want 200", path, status, b)
			}
		}
		resp, err := http.Post(r.base+"/tile/0/000", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST a tile: %d, want 405", resp.StatusCode)
		}

		// An entry altered in the store: its bundle no longer hashes to
		// the signed tree.
		if _, err := db.ExecContext(ctx, db.Rebind("UPDATE translog_entries SET data = ? WHERE idx = ?"), []byte(`{"n":300,"caller":"someone else"}`), 300); err != nil {
			t.Fatal(err)
		}
		p, err := tlog.ProveRecord(size, 300, hr)
		if err != nil {
			t.Fatal(err)
		}
		bundle, _ := r.get("tile/entries/001", false)
		if err := tlog.CheckRecord(p, size, root, 300, tlog.RecordHash(bundleEntry(t, bundle, 300-256))); err == nil {
			t.Error("an entry altered in the store still proves against the checkpoint")
		}
	})
}

// bundleEntry is entry k of a tlog-tiles entry bundle (each entry after
// its length, a big-endian uint16).
func bundleEntry(t *testing.T, bundle []byte, k int) []byte {
	t.Helper()
	for i := 0; ; i++ {
		if len(bundle) < 2 {
			t.Fatalf("the bundle ends before entry %d", k)
		}
		n := int(binary.BigEndian.Uint16(bundle))
		if len(bundle) < 2+n {
			t.Fatalf("entry %d of the bundle is cut short", i)
		}
		if i == k {
			return bundle[2 : 2+n]
		}
		bundle = bundle[2+n:]
	}
}

func TestReplicasShareOneLog(t *testing.T) {
	ctx := context.Background()
	target := pgtest.Start(t).NewDatabase(t)
	skey, vkey := newKey(t)
	a, _ := open(t, target, skey, nil)
	b, _ := open(t, target, skey, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var sizes [2][]int64
	for r, l := range []*translog.Log{a, b} {
		wg.Go(func() {
			for i := range 40 {
				var es []translog.Entry
				for j := range 1 + i%9 {
					es = append(es, entry(1000*r+10*i+j, time.Now()))
				}
				if _, err := l.Append(ctx, es...); err != nil {
					errs <- err
					return
				}
				if i%10 == 9 {
					c, err := l.Sign(ctx)
					if err != nil {
						errs <- err
						return
					}
					sizes[r] = append(sizes[r], c.Size)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var want int64
	for i := range 40 {
		want += 2 * int64(1+i%9)
	}
	size, err := a.Size(ctx)
	if err != nil || size != want {
		t.Fatalf("size %d (%v), want %d", size, err, want)
	}
	ca, err := a.Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Size != cb.Size || ca.Root != cb.Root {
		t.Fatalf("the replicas sign different heads: %d %v and %d %v", ca.Size, ca.Root, cb.Size, cb.Root)
	}
	top, root := checkpoint(t, ca.Note, vkey)
	// Every checkpoint either replica signed on the way is a prefix of the
	// final tree: one log.
	for r, l := range []*translog.Log{a, b} {
		for _, s := range sizes[r] {
			old, err := l.TreeHash(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			p, err := l.ProveTree(ctx, top, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := tlog.CheckTree(p, top, root, s, old); err != nil {
				t.Errorf("replica %d's checkpoint of size %d: %v", r, s, err)
			}
		}
	}
	// The root is the tree of the entries as stored, hashed afresh: no
	// replica extended the tree from hashes another had moved past.
	var data [][]byte
	for i := range top {
		e, err := b.Get(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, e.Data)
	}
	if fresh := treeOf(t, data); fresh != root {
		t.Fatalf("the signed root %v is not the tree of the stored entries, %v", root, fresh)
	}
	for i := range top {
		e, err := b.Get(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.ProveEntry(ctx, i, top)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckRecord(p, top, root, i, tlog.RecordHash(e.Data)); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// memHashes is a tree's stored hashes in memory (tlog.HashReader).
type memHashes []tlog.Hash

func (m memHashes) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = m[x]
	}
	return out, nil
}

// treeOf is the root of the tree of data, hashed here and now.
func treeOf(t *testing.T, data [][]byte) tlog.Hash {
	t.Helper()
	var m memHashes
	for n, d := range data {
		hs, err := tlog.StoredHashes(int64(n), d, m)
		if err != nil {
			t.Fatal(err)
		}
		m = append(m, hs...)
	}
	root, err := tlog.TreeHash(int64(len(data)), m)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestPrune(t *testing.T) {
	dialects(t, func(t *testing.T, target string) {
		ctx := context.Background()
		skey, vkey := newKey(t)
		now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
		l, db := open(t, target, skey, func() time.Time { return now })
		appendN(t, l, 0, 600, now.Add(-48*time.Hour))
		if m, err := l.Prune(ctx, translog.Retention{MaxAge: time.Hour}); err != nil || m != 0 {
			t.Fatalf("with no checkpoint signed, Prune moved the minimum index to %d (%v)", m, err)
		}
		old, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 600, 400, now)
		c, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var before int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM translog_hashes").Scan(&before); err != nil {
			t.Fatal(err)
		}
		// Older than an hour: entries 0–599; whole tiles go, 0–511.
		m, err := l.Prune(ctx, translog.Retention{MaxAge: time.Hour})
		if err != nil || m != 512 {
			t.Fatalf("minimum index %d (%v), want 512", m, err)
		}
		var after int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM translog_hashes").Scan(&after); err != nil {
			t.Fatal(err)
		}
		// Entries 255 and 511 held the tiles' roots (level 8) and 511
		// their parent's (level 9): those three stay.
		if after != before+3 {
			t.Errorf("%d hashes kept apart before pruning two tiles, %d after; want 3 more", before, after)
		}
		if _, err := l.Get(ctx, 511); err == nil {
			t.Error("entry 511 is still held")
		}
		srv := httptest.NewServer(l.Handler())
		defer srv.Close()
		r := tiles{t, srv.URL}
		for path, want := range map[string]int{"tile/0/000": 404, "tile/0/001": 404, "tile/entries/001": 404, "tile/0/002": 200, "tile/entries/002": 200, "tile/1/000.p/3": 200} {
			if b, status := r.get(path, false); status != want {
				t.Errorf("GET %s after pruning: %d %.80q, want %d", path, status, b, want)
			}
		}
		size, root := checkpoint(t, c.Note, vkey)
		hr := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, r)
		for _, i := range []int64{512, 700, 999} {
			e, err := l.Get(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			for name, reader := range map[string]tlog.HashReader{"the store": nil, "the tiles": hr} {
				var p tlog.RecordProof
				if reader == nil {
					p, err = l.ProveEntry(ctx, i, size)
				} else {
					p, err = tlog.ProveRecord(size, i, reader)
				}
				if err != nil {
					t.Fatalf("entry %d after pruning, from %s: %v", i, name, err)
				}
				if err := tlog.CheckRecord(p, size, root, i, tlog.RecordHash(e.Data)); err != nil {
					t.Errorf("entry %d after pruning, from %s: %v", i, name, err)
				}
			}
		}
		// The checkpoint of size 600 is past the minimum index: it is
		// still proved a prefix.
		p, err := l.ProveTree(ctx, size, old.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckTree(p, size, root, old.Size, old.Root); err != nil {
			t.Errorf("the tree of 600 after pruning: %v", err)
		}
		// At most 100 entries: whole tiles up to 768, within the
		// latest checkpoint.
		if m, err := l.Prune(ctx, translog.Retention{MaxEntries: 100}); err != nil || m != 768 {
			t.Fatalf("minimum index %d (%v), want 768", m, err)
		}
		if _, err := l.Get(ctx, 768); err != nil {
			t.Errorf("entry 768: %v", err)
		}
		appendN(t, l, 1000, 5, now)
		if got, err := l.Size(ctx); err != nil || got != 1005 {
			t.Fatalf("size %d after appending to a pruned log (%v)", got, err)
		}
	})
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	skey, _ := newKey(t)
	target := filepath.Join(t.TempDir(), "log.db")
	l, _ := open(t, target, skey, nil)
	appendN(t, l, 0, 3, time.Now())
	for _, es := range [][]translog.Entry{
		{entry(3, time.Now()), {Data: make([]byte, translog.MaxEntryBytes+1)}},
		{entry(3, time.Now()), {Data: nil}},
		nil,
	} {
		if _, err := l.Append(ctx, es...); err == nil {
			t.Errorf("appending %d entries, one empty or over %d bytes (or none): no error", len(es), translog.MaxEntryBytes)
		}
	}
	if _, err := l.Append(ctx, translog.Entry{Data: make([]byte, translog.MaxEntryBytes)}); err != nil {
		t.Errorf("an entry of exactly %d bytes: %v", translog.MaxEntryBytes, err)
	}
	if size, _ := l.Size(ctx); size != 4 {
		t.Errorf("size %d: a refused call kept something", size)
	}
	db, err := datastore.Open(ctx, "svc", target, empty, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	other, _, _ := note.GenerateKey(rand.Reader, "elsewhere.example/log")
	for _, c := range []struct {
		cfg  translog.Config
		want string
	}{
		{translog.Config{DB: db, Origin: origin, Key: "not a key"}, "not a note signer key"},
		{translog.Config{DB: db, Origin: origin, Key: other}, "C2SP tlog-checkpoint wants them equal"},
		{translog.Config{DB: db, Origin: "two words", Key: skey}, "schema-less URL"},
		{translog.Config{DB: db, Origin: "", Key: skey}, "schema-less URL"},
		{translog.Config{Origin: origin, Key: skey}, "no datastore"},
	} {
		if _, err := translog.Open(ctx, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, key %.20q): %v, want %q", c.cfg.Origin, c.cfg.Key, err, c.want)
		}
	}
}

// TestAcrossARestart: a log reopened goes on from where it stood, and its
// next checkpoint is proved an extension of the one before the restart.
func TestAcrossARestart(t *testing.T) {
	dialects(t, func(t *testing.T, target string) {
		ctx := context.Background()
		skey, vkey := newKey(t)
		l, db := open(t, target, skey, nil)
		appendN(t, l, 0, 300, time.Now())
		before, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = db.Close()

		l, _ = open(t, target, skey, nil)
		if c, err := l.Latest(ctx); err != nil || c.Size != before.Size || c.Root != before.Root {
			t.Fatalf("after the restart the latest checkpoint is %d %v (%v), want %d %v", c.Size, c.Root, err, before.Size, before.Root)
		}
		appendN(t, l, 300, 10, time.Now())
		after, err := l.Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		size, root := checkpoint(t, after.Note, vkey)
		p, err := l.ProveTree(ctx, size, before.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckTree(p, size, root, before.Size, before.Root); err != nil || size != 310 {
			t.Errorf("the checkpoint of %d after the restart, from %d before it: %v", size, before.Size, err)
		}
	})
}
