package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pcv1 "github.com/callerauth/callerauth/api/platformconnector/v1"
	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/kit/cluster"
	"github.com/callerauth/callerauth/internal/services/connector"
)

const (
	agentsNS          = "gpu-agents"
	connectorAudience = "platform-connector.nvsentinel.nvidia.com"
	tokenVolume       = "platform-connector-token"
	tokenDir          = "/var/run/secrets/nvsentinel/platform-connector"
)

// TestSeed003ConnectorOnTheNode: the connector's DaemonSet in the socket
// role on the node, in enforce; a node agent's pod on the node, with a
// token the kubelet projected (the connector's audience, 600 s),
// publishes over the hostPath socket: accepted and stored once. A token of
// a pod on another node is refused node_claim_mismatch, an event naming
// another node node_mismatch; a deleted pod's token is refused within the
// verdict cache's bound with the bound-object watch off, and within 5 s
// with it on.
func TestSeed003ConnectorOnTheNode(t *testing.T) {
	readoutOnFailure(t)
	ctx := context.Background()
	socketDir, dataDir := node.HostDir("/var/run/nvsentinel"), node.HostDir("/var/lib/platform-connector")
	values := func(watch bool) string { return connectorValues(socketDir, dataDir, watch) }
	install(ctx, t, "platform-connector", "platform-connector", "nvsentinel", "privileged", values(false))
	socket := "unix://" + filepath.Join(socketDir, "platform-connector.sock")

	agents := agentsNS
	agentsReady(ctx, t)

	// A node agent publishing from its pod, through the CLI in the
	// callerauth image, with the token the kubelet projected.
	agent := agentPod("agent", socketDir, &corev1.Container{Name: "publish", Image: built["callerauth"].Ref, ImagePullPolicy: corev1.PullNever,
		Args: []string{"publish", "--address", socket, "--token-file", tokenDir + "/token", "--check-name", "GpuXid", "--message", "xid 79 from the agent pod", "--retry", "60s"}})
	agent.Spec.RestartPolicy = corev1.RestartPolicyNever
	agent = createPod(ctx, t, agent)
	if err := poll(ctx, 2*time.Minute, func() error { return podPhase(ctx, agent, corev1.PodSucceeded) }); err != nil {
		t.Fatalf("the agent's publish: %v", err)
	}
	var mine []connector.StoredEvent
	for _, e := range stored(t, dataDir) {
		if e.Event.GetMessage() == "xid 79 from the agent pod" {
			mine = append(mine, e)
		}
	}
	if len(mine) != 1 || mine[0].Node != cluster.NodeName || mine[0].Caller != "system:serviceaccount:gpu-agents:gpu-agent" {
		t.Fatalf("the agent's event stored %d times (want once, on %s, by system:serviceaccount:gpu-agents:gpu-agent): %+v", len(mine), cluster.NodeName, mine)
	}

	// A pod whose token the test presents itself: what the kubelet
	// projected, read where the kubelet wrote it.
	holder := createPod(ctx, t, agentPod("holder", socketDir, &corev1.Container{Name: "pause", Image: cluster.SandboxImage, ImagePullPolicy: corev1.PullNever}))
	if err := poll(ctx, time.Minute, func() error { return podPhase(ctx, holder, corev1.PodRunning) }); err != nil {
		t.Fatal(err)
	}
	projected := readProjected(t, holder)
	if err := publish(ctx, socket, projected, ""); err != nil {
		t.Fatalf("the holder's projected token: %v", err)
	}
	if got := reason(publish(ctx, socket, projected, "node-2")); got != "node_mismatch" {
		t.Errorf("an event naming node-2 with a token of %s: %q; want node_mismatch", cluster.NodeName, got)
	}

	// A token bound to a pod on another node (a Node object no kubelet
	// runs; tainted, so that the DaemonSet leaves it alone).
	otherNode(ctx, t, "node-2")
	away := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "away", Namespace: agents},
		Spec: corev1.PodSpec{NodeName: "node-2", ServiceAccountName: "gpu-agent", Containers: []corev1.Container{{Name: "pause", Image: cluster.SandboxImage}}}}
	away = createPod(ctx, t, away)
	tr, err := node.API.Client.CoreV1().ServiceAccounts(agents).CreateToken(ctx, "gpu-agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{connectorAudience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: away.Name, UID: away.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := reason(publish(ctx, socket, tr.Status.Token, "")); got != "node_claim_mismatch" {
		t.Errorf("a token bound to a pod on node-2: %q; want node_claim_mismatch", got)
	}

	// Deleted: with the watch off, a TokenReview per verdict-cache miss:
	// refused once the cache (--caller-cache-ttl, 2m) and the API
	// server's own (about 10 s) have let go.
	refusedAfterDelete(ctx, t, socket, holder, projected, 2*time.Minute+20*time.Second)

	// On: refused within the watch's delay.
	install(ctx, t, "platform-connector", "platform-connector", "nvsentinel", "privileged", values(true))
	holder = createPod(ctx, t, agentPod("holder-watched", socketDir, &corev1.Container{Name: "pause", Image: cluster.SandboxImage, ImagePullPolicy: corev1.PullNever}))
	if err := poll(ctx, time.Minute, func() error { return podPhase(ctx, holder, corev1.PodRunning) }); err != nil {
		t.Fatal(err)
	}
	projected = readProjected(t, holder)
	if err := poll(ctx, time.Minute, func() error { return publish(ctx, socket, projected, "") }); err != nil {
		t.Fatalf("the watched holder's projected token: %v", err)
	}
	refusedAfterDelete(ctx, t, socket, holder, projected, 5*time.Second)
}

// connectorInstalled installs the connector's socket role (the
// bound-object watch on) unless it is, and the agents' namespace; it
// returns the socket's address and directory.
func connectorInstalled(ctx context.Context, t *testing.T) (socket, socketDir string) {
	t.Helper()
	socketDir, dataDir := node.HostDir("/var/run/nvsentinel"), node.HostDir("/var/lib/platform-connector")
	install(ctx, t, "platform-connector", "platform-connector", "nvsentinel", "privileged", connectorValues(socketDir, dataDir, true))
	agentsReady(ctx, t)
	return "unix://" + filepath.Join(socketDir, "platform-connector.sock"), socketDir
}

func connectorValues(socketDir, dataDir string, watch bool) string {
	return fmt.Sprintf("global:\n  platformConnectorAuth:\n    enabled: true\n    mode: enforce\n    tokenExpirationSeconds: 600\n"+
		"daemonset:\n  socketDir: %s\n  datastoreDir: %s\n  watchBoundObjects: %t\n", socketDir, dataDir, watch)
}

// agentsReady makes the agents' namespace (privileged, for the socket's
// hostPath) and their ServiceAccount, unless they are.
func agentsReady(ctx context.Context, t *testing.T) {
	t.Helper()
	namespace(ctx, t, agentsNS, "privileged")
	_, err := node.API.Client.CoreV1().ServiceAccounts(agentsNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gpu-agent"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// refusedAfterDelete deletes pod and checks that its token is refused
// within bound, and stays refused.
func refusedAfterDelete(ctx context.Context, t *testing.T, socket string, pod *corev1.Pod, token string, bound time.Duration) {
	t.Helper()
	if err := node.API.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var last error
	for time.Since(deleted) < bound+30*time.Second {
		if last = publish(ctx, socket, token, ""); last != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(deleted)
	switch {
	case last == nil:
		t.Fatalf("%s deleted: its token still accepted %s later (bound %s)", pod.Name, took.Round(time.Second), bound)
	case status.Code(last) != 16: // Unauthenticated
		t.Fatalf("%s deleted: %v; want Unauthenticated", pod.Name, last)
	case took > bound:
		t.Errorf("%s deleted: its token refused only after %s (bound %s)", pod.Name, took.Round(100*time.Millisecond), bound)
	}
	t.Logf("%s deleted: its token refused after %s (%s; bound %s)", pod.Name, took.Round(100*time.Millisecond), reason(last), bound)
	if err := publish(ctx, socket, token, ""); status.Code(err) != 16 {
		t.Errorf("%s deleted, later: %v; want Unauthenticated", pod.Name, err)
	}
}

// agentPod is a pod of the gpu-agent account on this node, running as
// the socket's owner, with the connector's projected token and the
// socket's directory.
func agentPod(name, socketDir string, c *corev1.Container) *corev1.Pod {
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: tokenVolume, MountPath: tokenDir, ReadOnly: true},
		corev1.VolumeMount{Name: "socket", MountPath: socketDir})
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentsNS}, Spec: corev1.PodSpec{
		ServiceAccountName: "gpu-agent", AutomountServiceAccountToken: ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), RunAsNonRoot: ptr.To(true)},
		Containers:      []corev1.Container{*c},
		Volumes: []corev1.Volume{
			{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: connectorAudience, ExpirationSeconds: ptr.To[int64](600), Path: "token"}}}}}},
			{Name: "socket", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: socketDir, Type: ptr.To(corev1.HostPathDirectory)}}},
		},
	}}
}

func createPod(ctx context.Context, t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := node.API.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return out
}

func podPhase(ctx context.Context, p *corev1.Pod, want corev1.PodPhase) error {
	got, err := node.API.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got.Status.Phase != want {
		return fmt.Errorf("pod %s/%s is %s, not %s", p.Namespace, p.Name, got.Status.Phase, want)
	}
	return nil
}

// otherNode makes a Node object no kubelet runs, tainted NoSchedule.
func otherNode(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := node.API.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "callerauth.test/no-kubelet", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// readProjected reads the connector's token the kubelet wrote into pod's
// volume.
func readProjected(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	return readProjectedFrom(t, pod, tokenVolume)
}

// readProjectedFrom reads the token the kubelet wrote into pod's
// projected volume.
func readProjectedFrom(t *testing.T, pod *corev1.Pod, volume string) string {
	t.Helper()
	var tok []byte
	err := poll(context.Background(), 30*time.Second, func() error {
		var err error
		tok, err = os.ReadFile(node.ProjectedFile(string(pod.UID), volume, "token"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(tok))
}

// publish sends one event over the socket with token; node "" lets the
// connector stamp its own.
func publish(ctx context.Context, socket, token, nodeName string) error {
	p, err := connector.NewPublisher(credentials.Config{Address: socket, Token: token})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.Publish(ctx, &pcv1.HealthEvent{Version: 1, Agent: "test-cluster", ComponentClass: "GPU", CheckName: "GpuXid", Message: "from the test", NodeName: nodeName})
}

// stored is what the connector stored, read from its datastore on the node.
func stored(t *testing.T, dataDir string) []connector.StoredEvent {
	t.Helper()
	s, err := connector.OpenStore(filepath.Join(dataDir, "events.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.List(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
