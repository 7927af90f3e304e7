package devissuer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/google/uuid"

	"github.com/callerauth/callerauth/internal/foundation/ijson"
	"github.com/callerauth/callerauth/internal/foundation/pki"
)

// registry is what the issuer knows of the cluster: the UIDs of the service
// accounts and nodes that tokens name, and the pods tokens are bound to. It
// is kept in registry.json in the state directory so that the CLI and a
// running issuer share it; changes are made under an flock on registry.lock.
type registry struct {
	// Revision counts the changes made: the resource version of the
	// metadata the issuer serves (watch.go).
	Revision        uint64            `json:"revision"`
	ServiceAccounts map[string]string `json:"serviceAccounts"`  // "ns/name" -> uid
	Nodes           map[string]string `json:"nodes"`            // name -> uid
	Pods            map[string]pod    `json:"pods"`             // "ns/name" -> pod
	Grants          []AccessGrant     `json:"grants,omitempty"` // SubjectAccessReview's (access.go)
}

type pod struct {
	UID  string `json:"uid"`
	Node string `json:"node,omitempty"` // empty: not scheduled
}

// newRegistry is an empty registry at revision 1, as etcd's revisions
// start: a resource version of "0" means "any" to a watch (the current
// state as Added events, no deletions), never a state the issuer had.
func newRegistry() *registry {
	return &registry{Revision: 1, ServiceAccounts: map[string]string{}, Nodes: map[string]string{}, Pods: map[string]pod{}}
}

func (i *Issuer) registryPath() string { return filepath.Join(i.dir, "registry.json") }

// readRegistry returns the registry, re-reading the file only when it has
// changed since the last read.
func (i *Issuer) readRegistry() (*registry, error) {
	st, err := os.Stat(i.registryPath())
	if errors.Is(err, fs.ErrNotExist) {
		return newRegistry(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	i.regMu.Lock()
	defer i.regMu.Unlock()
	// The file is replaced by rename, so a new inode means new content.
	if i.reg != nil && os.SameFile(st, i.regStat) && st.ModTime().Equal(i.regStat.ModTime()) && st.Size() == i.regStat.Size() {
		return i.reg, nil
	}
	b, err := os.ReadFile(i.registryPath())
	if err != nil {
		return nil, fmt.Errorf("devissuer: %w", err)
	}
	r := newRegistry()
	if err := ijson.Decode(b, r); err != nil {
		return nil, fmt.Errorf("devissuer: parsing %s: %w", i.registryPath(), err)
	}
	i.reg, i.regStat = r, st
	if i.seen == nil || len(i.seen) >= maxSeen {
		i.seen = map[uint64]*registry{}
	}
	i.seen[r.Revision] = r
	return r, nil
}

// updateRegistry applies f to a fresh copy of the registry under the file
// lock and writes the result back atomically.
func (i *Issuer) updateRegistry(f func(*registry) error) error {
	lock, err := os.OpenFile(filepath.Join(i.dir, "registry.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("devissuer: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("devissuer: locking registry: %w", err)
	}
	r := newRegistry()
	b, err := os.ReadFile(i.registryPath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("devissuer: %w", err)
	default:
		if err := ijson.Decode(b, r); err != nil {
			return fmt.Errorf("devissuer: parsing %s: %w", i.registryPath(), err)
		}
	}
	if err := f(r); err != nil {
		return err
	}
	r.Revision++
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("devissuer: %w", err)
	}
	if err := pki.WriteFileAtomic(i.registryPath(), out, 0o600); err != nil {
		return fmt.Errorf("devissuer: %w", err)
	}
	return nil
}

func newUID() string { return uuid.NewString() }

// maxSeen bounds the registries kept for watches to replay from.
const maxSeen = 256

// registryAt is the registry as it was at revision rev, if it was read
// then and is still remembered.
func (i *Issuer) registryAt(rev uint64) (*registry, bool) {
	i.regMu.Lock()
	defer i.regMu.Unlock()
	r, ok := i.seen[rev]
	return r, ok
}
