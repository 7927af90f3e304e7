package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Readout is what runs where, for a failed test to print: the nodes and
// their conditions, every pod with its node, phase, conditions and
// containers' states, the Events of every namespace, and the end of each
// container's log — enough to read a CI failure without running it again.
func (c *Cluster) Readout(ctx context.Context) string {
	var b strings.Builder
	cs := c.API.Client
	if nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "nodes: %v\n", err)
	} else {
		for _, n := range nodes.Items {
			fmt.Fprintf(&b, "node %s:", n.Name)
			for _, cond := range n.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s", cond.Type, cond.Status)
			}
			b.WriteString("\n")
		}
	}
	if pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s/%s on %q: %s %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason)
			for _, cond := range p.Status.Conditions {
				if cond.Status != corev1.ConditionTrue {
					fmt.Fprintf(&b, " %s=%s(%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
				}
			}
			b.WriteString("\n")
			for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				fmt.Fprintf(&b, "  container %s ready=%t restarts=%d %s\n", st.Name, st.Ready, st.RestartCount, state(st.State))
				if st.LastTerminationState.Terminated != nil {
					fmt.Fprintf(&b, "    last: %s\n", state(st.LastTerminationState))
				}
			}
		}
	}
	if events, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	} else {
		items := events.Items
		sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
		for _, e := range items {
			fmt.Fprintf(&b, "event %s %s/%s %s %s (x%d): %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Namespace, e.Reason, e.Count, e.Message)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(c.path("pod-logs"), "*", "*", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		rel, _ := filepath.Rel(c.path("pod-logs"), l)
		fmt.Fprintf(&b, "--- log %s:\n%s\n", rel, data)
	}
	return b.String()
}

func state(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason + ": " + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s (exit %d): %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}
