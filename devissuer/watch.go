package devissuer

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// The issuer serves the metadata of its pods and service accounts the way
// the API server does to a metadata client (client-go/metadata): a list as
// PartialObjectMetadataList and a watch of PartialObjectMetadata events,
// across all namespaces, pods optionally narrowed to one node with the
// field selector spec.nodeName. That is what a service needs to check
// tokens' bound objects from a watch (kube.Bound) against the dev issuer.
// The registry's revision is the resource version; a watch from an older
// one replays what changed since when the issuer still remembers that
// revision (its last 256 reads), else is answered 410 Gone, as the API
// server answers a compacted one, and the client lists again.

const (
	// watchPoll is how often a watch looks for a changed registry (the
	// registry is a file other processes change).
	watchPoll = 50 * time.Millisecond
	// maxWatch bounds a watch that asks for no timeout.
	maxWatch = 10 * time.Minute
	// bookmarkLead and bookmarkEvery are the API server's: a bookmark that
	// long before a watch's deadline, and at least that often.
	bookmarkLead  = 2 * time.Second
	bookmarkEvery = time.Minute
)

// object is one pod or service account as a metadata client sees it.
type object struct {
	namespace, name, uid string
}

func (o object) meta(rv uint64) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: o.name, UID: types.UID(o.uid), ResourceVersion: strconv.FormatUint(rv, 10)},
	}
}

// selection picks the objects of one resource out of the registry.
type selection func(*registry) map[string]object

func splitKey(k string) (ns, name string) {
	ns, name, _ = strings.Cut(k, "/")
	return ns, name
}

func podsOn(node string) selection {
	return func(r *registry) map[string]object {
		out := make(map[string]object, len(r.Pods))
		for k, p := range r.Pods {
			if node == "" || p.Node == node {
				ns, name := splitKey(k)
				out[k] = object{ns, name, p.UID}
			}
		}
		return out
	}
}

func serviceAccounts(r *registry) map[string]object {
	out := make(map[string]object, len(r.ServiceAccounts))
	for k, uid := range r.ServiceAccounts {
		ns, name := splitKey(k)
		out[k] = object{ns, name, uid}
	}
	return out
}

func (i *Issuer) servePods(w http.ResponseWriter, r *http.Request) {
	node, err := nodeSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	i.serveMetadata(w, r, "pods", podsOn(node))
}

func (i *Issuer) serveServiceAccounts(w http.ResponseWriter, r *http.Request) {
	if fs := r.URL.Query().Get("fieldSelector"); fs != "" {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("fieldSelector %q: the dev issuer selects service accounts by no field", fs))
		return
	}
	i.serveMetadata(w, r, "serviceaccounts", serviceAccounts)
}

// nodeSelector reads the one pod field selector the issuer knows.
func nodeSelector(fs string) (string, error) {
	if fs == "" {
		return "", nil
	}
	node, ok := strings.CutPrefix(fs, "spec.nodeName=")
	if !ok || node == "" || strings.ContainsAny(node, ",=!") {
		return "", fmt.Errorf("fieldSelector %q: the dev issuer selects pods by spec.nodeName=<node> only", fs)
	}
	return node, nil
}

func (i *Issuer) serveMetadata(w http.ResponseWriter, r *http.Request, resource string, sel selection) {
	q := r.URL.Query()
	verb := "list"
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		verb = "watch"
	}
	if !i.authorize(w, r, verb, resource, "") {
		return
	}
	if q.Get("labelSelector") != "" {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "labelSelector: the dev issuer's objects have no labels")
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		writeStatus(w, http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, "the dev issuer serves object metadata only: ask for PartialObjectMetadata (client-go/metadata)")
		return
	}
	reg, err := i.readRegistry()
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	if verb == "list" {
		list := metav1.PartialObjectMetadataList{
			TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(reg.Revision, 10)},
		}
		objs := sel(reg)
		for _, k := range slices.Sorted(maps.Keys(objs)) {
			list.Items = append(list.Items, objs[k].meta(reg.Revision))
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	i.watchMetadata(w, r, reg, sel)
}

// watchMetadata streams what changes in sel's objects from reg on, until
// the client goes, the asked-for timeout passes or maxWatch does.
func (i *Issuer) watchMetadata(w http.ResponseWriter, r *http.Request, reg *registry, sel selection) {
	q := r.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	rv := q.Get("resourceVersion")
	from := reg // what the client has seen: the changes since are sent
	if !initial && rv != "" && rv != "0" && rv != strconv.FormatUint(reg.Revision, 10) {
		n, err := strconv.ParseUint(rv, 10, 64)
		old, ok := i.registryAt(n)
		if err != nil || !ok {
			writeStatus(w, http.StatusGone, metav1.StatusReasonExpired, fmt.Sprintf("too old resource version: %s (%d)", rv, reg.Revision))
			return
		}
		from = old
	}
	timeout := maxWatch
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 && time.Duration(s)*time.Second < timeout {
		timeout = time.Duration(s) * time.Second
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	send := func(t watch.EventType, m metav1.PartialObjectMetadata) bool {
		if err := enc.Encode(map[string]any{"type": t, "object": m}); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	seen := sel(from)
	if initial || rv == "" || rv == "0" {
		for _, k := range slices.Sorted(maps.Keys(seen)) {
			if !send(watch.Added, seen[k].meta(reg.Revision)) {
				return
			}
		}
	}
	if initial {
		end := object{}.meta(reg.Revision)
		end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		if !send(watch.Bookmark, end) {
			return
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(watchPoll)
	defer tick.Stop()
	// As the API server's watch cache does: a bookmark two seconds before
	// the deadline (when there is time for one) and at least every minute,
	// so that a client learns its view is current as of now.
	heartbeat := time.NewTimer(nextBookmark(timeout))
	defer heartbeat.Stop()
	ends := time.Now().Add(timeout)
	due := false // a heartbeat bookmark is due
	for rev, first := from.Revision, true; ; first = false {
		if !first {
			select {
			case <-r.Context().Done():
				return
			case <-deadline.C:
				return
			case <-heartbeat.C:
				// The changes made until now are sent first: the
				// bookmark says the client has everything before it.
				due = true
				if left := time.Until(ends); left > bookmarkLead {
					heartbeat.Reset(nextBookmark(left))
				}
			case <-tick.C:
			}
		}
		reg, err := i.readRegistry()
		if err != nil {
			continue // a registry being rewritten is read again at the next tick
		}
		if reg.Revision == rev {
			if due && bookmarks && !send(watch.Bookmark, object{}.meta(rev)) {
				return
			}
			due = false
			continue
		}
		rev = reg.Revision
		now := sel(reg)
		changed := false
		for _, k := range slices.Sorted(maps.Keys(seen)) {
			if o, ok := now[k]; !ok || o.uid != seen[k].uid {
				changed = true
				if !send(watch.Deleted, seen[k].meta(rev)) {
					return
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(now)) {
			if o, ok := seen[k]; !ok || o.uid != now[k].uid {
				changed = true
				if !send(watch.Added, now[k].meta(rev)) {
					return
				}
			}
		}
		if (!changed || due) && bookmarks && !send(watch.Bookmark, object{}.meta(rev)) {
			return
		}
		due = false
		seen = now
	}
}

// nextBookmark is how long from now, with left until the watch's deadline,
// the next bookmark is due: a minute on, or bookmarkLead before the
// deadline when that comes first (at once when it has passed).
func nextBookmark(left time.Duration) time.Duration {
	return max(min(bookmarkEvery, left-bookmarkLead), 0)
}
