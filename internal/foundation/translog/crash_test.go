package translog

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// crashData is what writer w adds as its s-th entry in the crash test.
func crashData(w, s int) []byte {
	return fmt.Appendf(nil, "writer %d entry %d %s", w, s, strings.Repeat("y", (w*31+s*17)%2000))
}

// TestCrashPoints kills a process that appends under load at each point
// of a write — before a group's write, between its write and its sync,
// after its sync, halfway through a tile's file, right after the next
// segment starts, and within a prune — and checks that the log it left
// holds every entry that process was told was in it, verifies with
// x/mod's tiles client, and goes on.
func TestCrashPoints(t *testing.T) {
	if os.Getenv("TRANSLOG_CRASH_DIR") != "" {
		crashChild()
		return
	}
	key := testKey(t, "example.com/crash")
	for _, c := range []struct {
		point string
		hit   int
	}{
		{"before-write", 40}, {"after-write", 40}, {"after-sync", 40},
		{"tile-write", 5}, {"rolled", 2}, {"prune-marked", 1}, {"prune-deleting", 2},
	} {
		t.Run(c.point, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashPoints$", "-test.count=1")
			cmd.Env = append(os.Environ(), "TRANSLOG_CRASH_DIR="+dir, "TRANSLOG_CRASH_KEY="+key,
				"TRANSLOG_CRASH_POINT="+c.point, "TRANSLOG_CRASH_HIT="+strconv.Itoa(c.hit))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			type ack struct{ idx, w, s int }
			var acks []ack
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var a ack
				if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d", &a.idx, &a.w, &a.s); err == nil {
					acks = append(acks, a)
				}
			}
			err = cmd.Wait()
			ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the writer was not killed at %s: %v\n%s", c.point, err, stderr.String())
			}
			if len(acks) == 0 {
				t.Fatalf("nothing was acknowledged before the crash")
			}
			r := start(t, Config{Dir: dir, Key: key, SegmentEntries: 512})
			minIdx := r.MinIndex()
			checked := 0
			for _, a := range acks {
				if int64(a.idx) < minIdx {
					continue
				}
				e, err := r.Entry(int64(a.idx))
				if err != nil || !bytes.Equal(e, crashData(a.w, a.s)) {
					t.Fatalf("acknowledged entry %d (writer %d, %d) lost: %q, %v", a.idx, a.w, a.s, e, err)
				}
				checked++
			}
			if checked == 0 {
				t.Fatalf("every acknowledged entry was pruned: nothing checked")
			}
			// The log as served, read as an auditor's tiles client reads it.
			if _, err := r.Sign(context.Background()); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(r.Handler())
			defer srv.Close()
			cp, _ := get(t, srv.URL+"/checkpoint")
			cpt, err := OpenCheckpoint(cp, r.Verifier())
			if err != nil {
				t.Fatal(err)
			}
			hr := tlog.TileHashReader(tlog.Tree{N: cpt.Size, Hash: cpt.Root}, tileClient{srv.URL, t})
			es, err := r.Entries(minIdx, int(cpt.Size-minIdx))
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				idx := minIdx + int64(i)
				hs, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, idx)})
				if err != nil || hs[0] != tlog.RecordHash(e) {
					t.Fatalf("entry %d does not verify against the tiles: %v", idx, err)
				}
			}
			size := r.Size()
			if _, err := r.Add([]byte("after the crash"))(); err != nil {
				t.Fatal(err)
			}
			c2, err := r.Sign(context.Background())
			if err != nil || c2.Size != size+1 {
				t.Fatalf("the next checkpoint: %d, %v", c2.Size, err)
			}
			p, err := r.ProveTree(c2.Size, cpt.Size)
			if err != nil || tlog.CheckTree(p, c2.Size, c2.Root, cpt.Size, cpt.Root) != nil {
				t.Fatalf("the next checkpoint does not extend the last: %v", err)
			}
			t.Logf("killed at %s: %d acknowledged, %d checked (pruned below %d), %d in the log", c.point, len(acks), checked, minIdx, size)
		})
	}
}

// crashChild appends from four writers, printing each acknowledged
// entry, until the crash hook kills it.
func crashChild() {
	point := os.Getenv("TRANSLOG_CRASH_POINT")
	hit, _ := strconv.Atoi(os.Getenv("TRANSLOG_CRASH_HIT"))
	var mu sync.Mutex
	hits := 0
	crashHook = func(p string) {
		if p != point {
			return
		}
		mu.Lock()
		hits++
		n := hits
		mu.Unlock()
		if n == hit {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
	}
	l, err := Open(Config{Dir: os.Getenv("TRANSLOG_CRASH_DIR"), Key: os.Getenv("TRANSLOG_CRASH_KEY"), Metrics: "crash",
		SegmentEntries: 512, SignEvery: 5 * time.Millisecond, PruneEvery: 5 * time.Millisecond, Retention: Retention{MaxEntries: 1500}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go func() { _ = l.Run(context.Background()) }()
	for l.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for s := range 5000 {
				idx, err := l.Add(crashData(w, s))()
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "ack %d %d %d\n", idx, w, s)
				out.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "the crash point was never reached:", point)
	os.Exit(3)
}
