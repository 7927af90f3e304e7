package connector_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/pgtest"
	"github.com/callerauth/callerauth/internal/services/connector"
)

// TestDeploymentReplicas runs three deployment-role connector binaries on
// one real PostgreSQL database. Nine publishers (three per replica), each
// a monitor pod bound to its own node, send batches of four events
// concurrently; every fifth batch also names another node, which node
// binding refuses. Every accepted batch is stored once and whole, no event
// of a refused batch is stored, and the replicas' events_stored_total
// counters add up to the rows in the database.
func TestDeploymentReplicas(t *testing.T) {
	const replicas, perReplica, batches, perBatch = 3, 3, 20, 4
	d := startDev(t)
	url := pgtest.Start(t).NewDatabase(t)
	certFile, keyFile, caFile := deploymentTLS(t)
	var procs []*proc
	for range replicas {
		p := startProc(t, configJSON(nil, "enforce", false), nil, "--role", "deployment", "--listen", "127.0.0.1:0",
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--kubeconfig", d.iss.KubeconfigFile(), "--datastore", url)
		p.datastore = url
		procs = append(procs, p)
	}

	type sent struct {
		ids      []string
		accepted bool
	}
	var mu sync.Mutex
	var all []sent
	var wg sync.WaitGroup
	for r, p := range procs {
		for i := range perReplica {
			node := fmt.Sprintf("node-%d-%d", r, i)
			tokenFile := d.token(t, "gpu-health-monitor", "monitor-"+node, node, aud)
			pub, err := connector.NewPublisher(credentials.Config{Address: p.addr, TLS: true, CAFile: caFile, ServerName: "localhost", TokenFile: tokenFile})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			wg.Go(func() {
				for b := range batches {
					var evs []*pcv1.HealthEvent
					s := sent{}
					for k := range perBatch {
						id := fmt.Sprintf("%s-b%d-e%d", node, b, k)
						target := node
						if b%5 == 4 && k == perBatch-1 {
							target = "node-elsewhere" // refused: the whole batch is
						}
						s.ids = append(s.ids, id)
						evs = append(evs, &pcv1.HealthEvent{Version: 1, Agent: "replicas", CheckName: "GpuXid", Message: id, NodeName: target})
					}
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err := pub.Publish(ctx, evs...)
					cancel()
					switch {
					case err == nil:
						s.accepted = true
					case status.Code(err) == codes.PermissionDenied && b%5 == 4:
					default:
						t.Errorf("%s batch %d: %v", node, b, err)
					}
					mu.Lock()
					all = append(all, s)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()

	s, err := connector.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.List(context.Background(), "", 1<<20)
	_ = s.Close()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range stored {
		count[e.Event.GetMessage()]++
	}
	var accepted, refused, lost, dups, leaked int
	for _, b := range all {
		if b.accepted {
			accepted++
		} else {
			refused++
		}
		for _, id := range b.ids {
			switch n := count[id]; {
			case b.accepted && n == 0:
				lost++
			case n > 1:
				dups += n - 1
			case !b.accepted && n > 0:
				leaked++ // an event of a refused batch
			}
		}
	}
	counted := 0.0
	for _, p := range procs {
		counted += p.totals(t)["platform_connector_events_stored_total"]
	}
	t.Logf("%d replicas on one PostgreSQL, %d publishers: %d batches accepted, %d refused whole; %d events stored; %d lost, %d duplicated, %d of refused batches stored; events_stored_total summed over replicas %v",
		replicas, replicas*perReplica, accepted, refused, len(stored), lost, dups, leaked, counted)
	if lost != 0 || dups != 0 || leaked != 0 {
		t.Fatalf("%d lost, %d duplicated, %d events of refused batches stored", lost, dups, leaked)
	}
	if want := accepted * perBatch; len(stored) != want || int(counted) != want {
		t.Fatalf("%d rows and %v counted; want %d", len(stored), counted, want)
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("%d accepted, %d refused: want both", accepted, refused)
	}
}
