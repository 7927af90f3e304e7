package kube

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// viewStore is the store the reflector fills: it keeps the slimmed
// objects, remembers the UIDs it sees go, and learns from lists and
// bookmarks how current it is.
type viewStore watched

var (
	_ cache.ReflectorStore         = (*viewStore)(nil)
	_ cache.ReflectorBookmarkStore = (*viewStore)(nil)
)

func (s *viewStore) Add(obj any) error { return s.put(obj) }

func (s *viewStore) Update(obj any) error { return s.put(obj) }

// object is the slimmed metadata of obj and its key in the store.
func (w *watched) object(obj any) (*metav1.PartialObjectMetadata, string, error) {
	m := slim(obj)
	if m == nil {
		return nil, "", fmt.Errorf("kube: %s: unexpected object %T", w.resource, obj)
	}
	return m, m.Namespace + "/" + m.Name, nil
}

func (s *viewStore) put(obj any) error {
	w := (*watched)(s)
	m, key, err := w.object(obj)
	if err != nil {
		return err
	}
	if old, ok, _ := w.store.GetByKey(key); ok {
		if u := uidOf(old); u != string(m.UID) {
			w.bury(u, w.now())
		}
	} else {
		w.held.Add(1)
	}
	if err := w.store.Add(m); err != nil {
		return err
	}
	w.reached(m.ResourceVersion)
	return nil
}

func (s *viewStore) Delete(obj any) error {
	w := (*watched)(s)
	m, key, err := w.object(obj)
	if err != nil {
		return err
	}
	if old, ok, _ := w.store.GetByKey(key); ok {
		w.held.Add(-1)
		w.bury(uidOf(old), w.now())
		if err := w.store.Delete(old); err != nil {
			return err
		}
	}
	w.bury(string(m.UID), w.now())
	w.reached(m.ResourceVersion)
	return nil
}

// Replace applies a list: what the store held and the list lacks (or holds
// under another UID) was deleted meanwhile.
func (s *viewStore) Replace(list []any, rv string) error {
	w := (*watched)(s)
	items := make([]any, 0, len(list))
	uids := make(map[string]string, len(list))
	for _, obj := range list {
		m := slim(obj)
		if m == nil {
			return fmt.Errorf("kube: %s: unexpected object %T", w.resource, obj)
		}
		items = append(items, m)
		uids[m.Namespace+"/"+m.Name] = string(m.UID)
	}
	now := w.now()
	for _, old := range w.store.List() {
		m := old.(*metav1.PartialObjectMetadata)
		if uids[m.Namespace+"/"+m.Name] != string(m.UID) {
			w.bury(string(m.UID), now)
		}
	}
	if err := w.store.Replace(items, rv); err != nil {
		return err
	}
	w.held.Store(int64(len(items)))
	w.mu.Lock()
	w.synced = true
	w.mu.Unlock()
	w.reached(rv)
	return nil
}

// Bookmark: every change the watch sends up to rv is in the store.
func (s *viewStore) Bookmark(rv string) error {
	(*watched)(s).reached(rv)
	return nil
}

func (s *viewStore) Resync() error { return nil }

// What the view knows of a bound object.
type presence int

const (
	// unknown: not in the view and not seen deleted — created after the
	// view's last event, or deleted before the view began.
	unknown presence = iota
	present
	gone
)

// deletedLeeway is the API server's: an object whose deletion timestamp is
// more than a minute past already invalidates its tokens; one being
// deleted gracefully (a timestamp in the future) does not yet.
const deletedLeeway = time.Minute

// find says whether the view holds namespace/name with that UID (judged as
// the API server's service-account authenticator judges it), has seen that
// UID deleted, or does not know.
func (w *watched) find(ns, name, uid string, now time.Time) presence {
	if w.deleted(uid) {
		return gone
	}
	obj, ok, err := w.store.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return unknown
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok || string(m.UID) != uid {
		// Another object of that name: either the token's was deleted
		// before the view began, or the view has not yet seen the token's.
		return unknown
	}
	if m.DeletionTimestamp != nil && m.DeletionTimestamp.Time.Before(now.Add(-deletedLeeway)) {
		return gone
	}
	return present
}

// tombstones remember the UIDs the watch saw deleted (or replaced under
// their name), for Tombstones: a token of one of them is refused without a
// review. The oldest is forgotten first when MaxTombstones are held.
type tombstones struct {
	ttl   time.Duration
	limit int
	at    map[string]time.Time
	order []string // oldest first
}

func (w *watched) bury(uid string, now time.Time) {
	if uid == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := &w.dead
	if _, ok := t.at[uid]; ok {
		return
	}
	t.at[uid] = now
	t.order = append(t.order, uid)
	for len(t.order) > 0 && (len(t.order) > t.limit || now.Sub(t.at[t.order[0]]) > t.ttl) {
		delete(t.at, t.order[0])
		t.order[0] = ""
		t.order = t.order[1:]
	}
}

func (w *watched) deleted(uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.dead.at[uid]
	return ok && w.now().Sub(at) <= w.dead.ttl
}

// slim keeps of an object's metadata what the view reads — name,
// namespace, UID, deletion timestamp — and the resource version:
// labels, annotations, owner references and managed fields would cost
// memory per object for nothing. Nil for anything but object metadata.
func slim(obj any) *metav1.PartialObjectMetadata {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, DeletionTimestamp: m.DeletionTimestamp,
	}}
}

// uidOf is the UID of an informer's object, or of the last state of one
// whose deletion was missed.
func uidOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return string(m.UID)
	}
	return ""
}
