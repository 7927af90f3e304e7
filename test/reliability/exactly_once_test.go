package reliability_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/devissuer"
	"github.com/callerauth/callerauth/internal/kit/e2e"
	"github.com/callerauth/callerauth/internal/kit/faults"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestExactlyOnce runs the real connector under six publishers that send
// batches of four events with PublishRetrying — each batch under one
// idempotency key, kept across its retries — while the connector is
// SIGKILLed and started again on the same datastore, and while a proxy
// between the publishers and the connector lets requests through, swallows
// the answers and then breaks the connections (each batch in flight stored,
// its publisher told Unavailable). Socket and deployment roles, SQLite and
// PostgreSQL. Every batch is acknowledged in the end; the database holds
// each acknowledged event once and nothing else: stored = the sum of the
// events acknowledged.
func TestExactlyOnce(t *testing.T) {
	for _, role := range []string{"socket", "deployment"} {
		for _, store := range []string{"sqlite", "postgres"} {
			t.Run(role+"/"+store, func(t *testing.T) { exactlyOnce(t, role, store) })
		}
	}
}

func exactlyOnce(t *testing.T, role, store string) {
	const (
		aud        = "platform-connector.nvsentinel.nvidia.com"
		publishers = 6
		perBatch   = 4
		minBatches = 400
	)
	v := startValidator(t)
	dir := t.TempDir()
	datastore := filepath.Join(dir, "events.db")
	if store == "postgres" {
		datastore = pgtest.Start(t).NewDatabase(t)
	}
	c := newConnectorSetup(t, v, dir, role, aud, datastore)
	args, env, cred, node, sock := c.args, c.env, c.cred, c.node, c.sock

	// The connector, and the proxy the publishers reach it through: the
	// same address across restarts (a restarted deployment binds another
	// port; the proxy follows it).
	var (
		p       *e2e.Process
		metrics string
		proxy   *faults.Proxy
	)
	start := func() string {
		p = e2e.Start(t, connectorBin, args, env...)
		metrics = p.LogValue(t, "connector: serving", "metrics", 60*time.Second)
		if role == "socket" {
			return sock
		}
		return p.LogValue(t, "connector: serving", "address", time.Second)
	}
	target := start()
	var err error
	if role == "socket" {
		proxy, err = faults.NewUnixProxy(filepath.Join(dir, "proxy.sock"), target)
		cred.Address = "unix://" + filepath.Join(dir, "proxy.sock")
	} else {
		proxy, err = faults.NewProxy(target)
		cred.Address = proxy.Addr()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)

	type batch struct {
		ids []string
		err error
	}
	var mu sync.Mutex
	var batches []batch
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range publishers {
		tok, err := v.iss.Mint(devissuer.TokenRequest{Namespace: "nvsentinel", ServiceAccount: "gpu-health-monitor", Pod: fmt.Sprintf("monitor-%d", i),
			Node: node(i), Audiences: []string{aud}, Lifetime: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		c := cred
		c.TokenFile = filepath.Join(dir, fmt.Sprintf("token-%d", i))
		writeAtomic(t, c.TokenFile, []byte(tok.Token))
		pub, err := connector.NewPublisher(c)
		if err != nil {
			t.Fatal(err)
		}
		pub.Backoff, pub.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
		wg.Go(func() {
			defer pub.Close()
			for j := 0; ctx.Err() == nil; j++ {
				var b batch
				var evs []*pcv1.HealthEvent
				for k := range perBatch {
					id := fmt.Sprintf("p%d-b%d-e%d", i, j, k)
					b.ids = append(b.ids, id)
					evs = append(evs, &pcv1.HealthEvent{Version: 1, Agent: "exactly-once", CheckName: "GpuXid", Message: id, NodeName: node(i), IsFatal: true})
				}
				pctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				b.err = pub.PublishRetrying(pctx, evs...)
				cancel()
				mu.Lock()
				batches = append(batches, b)
				mu.Unlock()
			}
		})
	}

	// The faults. Retries a connector answered as duplicates are counted
	// from its metric just before it is killed and at the end: a lower
	// bound (a retry answered between the scrape and the kill is missed).
	var kills, cuts int
	var duplicates float64
	cutAfterCommit := func() {
		proxy.HoldReplies(true)
		time.Sleep(200 * time.Millisecond) // requests go through, are stored; no answer comes back
		proxy.Cut()
		proxy.HoldReplies(false)
		if err := proxy.Mend(); err != nil {
			t.Fatal(err)
		}
		cuts++
	}
	kill := func() {
		if m, err := metricsAt(metrics); err == nil {
			duplicates += m["platform_connector_duplicate_batches_total"]
		}
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		kills++
		proxy.Retarget(start())
	}
	script := []func(){cutAfterCommit, kill, cutAfterCommit, kill, cutAfterCommit, kill, cutAfterCommit}
	time.Sleep(500 * time.Millisecond)
	for _, step := range script {
		step()
		time.Sleep(600 * time.Millisecond)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := len(batches)
		mu.Unlock()
		if n >= minBatches {
			break
		}
	}
	stopLoad()
	wg.Wait()
	duplicates += scrapeAt(t, metrics)["platform_connector_duplicate_batches_total"]

	failed := 0
	var acked [][]string
	for _, b := range batches {
		if b.err != nil {
			failed++
			t.Errorf("a batch was not acknowledged: %v", b.err)
			continue
		}
		acked = append(acked, b.ids)
	}
	l := tallyStore(t, datastore, acked)
	acknowledged, stored, lost, dups, extra := l.acknowledged, l.stored, l.lost, l.duplicated, l.unacknowledged
	t.Logf("%s, %s: %d batches of %d from %d publishers; %d cuts after the commit, %d SIGKILLs and restarts; %d events acknowledged, %d stored; "+
		"%d lost, %d duplicated, %d stored but not acknowledged, %d batches never acknowledged; at least %d retries answered as duplicates",
		role, store, len(batches), perBatch, publishers, cuts, kills, acknowledged, stored, lost, dups, extra, failed, int(duplicates))
	if lost != 0 || dups != 0 || extra != 0 || failed != 0 || stored != acknowledged {
		t.Errorf("%d lost, %d duplicated, %d stored but not acknowledged, %d batches not acknowledged, %d stored of %d acknowledged; want 0, 0, 0, 0 and stored = acknowledged",
			lost, dups, extra, failed, stored, acknowledged)
	}
	if duplicates == 0 {
		t.Error("no retry was answered as a duplicate: no answer was lost after its commit, the faults were not exercised")
	}
}
