package connector

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostDirs: a directory gets the mode and the owner (here the test's
// own, which any user may give), and a second run finds nothing to do (on
// a node, chmod of a directory no longer root's would need CAP_FOWNER:
// test/cluster restarts the DaemonSet's pod); a file, a symbolic link, a missing path
// and a malformed owner or mode are refused, naming what is wrong.
func TestHostDirs(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "socket")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(d, link); err != nil {
		t.Fatal(err)
	}
	owner := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := newHostDirsCommand(&out)
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		return out.String(), err
	}
	if out, err := run("--owner", owner, "--mode", "0755", d); err != nil || !strings.Contains(out, "mode 0755") {
		t.Fatalf("%v %s", err, out)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// The pod's next start (a restart, a rollout): nothing to change.
	if out, err := run("--owner", owner, "--mode", "0755", d); err != nil || !strings.Contains(out, "mode 0755 already") {
		t.Fatalf("again: %v %s", err, out)
	}
	// Another mode asked of a directory given away before.
	if out, err := run("--owner", owner, "--mode", "0750", d); err != nil || !strings.Contains(out, "mode 0750\n") {
		t.Fatalf("a new mode: %v %s", err, out)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode %v", fi.Mode())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--owner", owner, f}, "not a directory"},
		{[]string{"--owner", owner, link}, "not a directory"},
		{[]string{"--owner", owner, filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--owner", "nobody", d}, "want uid:gid"},
		{[]string{"--owner", owner, "--mode", "010000", d}, "want permission bits"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
}

// TestHostDirHint: a socket-role start-up that cannot write its socket
// or datastore says what a node needs (daemonset.prepareHostDirs), in the
// words the os and SQLite use; other errors, and the deployment role's,
// pass as they are.
func TestHostDirHint(t *testing.T) {
	for _, c := range []struct {
		role Role
		err  error
		hint bool
	}{
		{RoleSocket, &fs.PathError{Op: "open", Path: "/var/lib/platform-connector/events.db", Err: fs.ErrPermission}, true},
		{RoleSocket, errors.New("datastore: unable to open database file: /var/lib/platform-connector/events.db: permission denied"), true},
		{RoleSocket, errors.New("datastore: attempt to write a readonly database (8)"), true},
		{RoleSocket, errors.New("listen unix /run/x.sock: bind: read-only file system"), true},
		{RoleDeployment, &fs.PathError{Op: "open", Path: "/data/events.db", Err: fs.ErrPermission}, false},
		{RoleSocket, errors.New("datastore: no such table"), false},
	} {
		got := hostDirHint(c.role, "--datastore", c.err)
		if has := strings.Contains(got.Error(), "daemonset.prepareHostDirs"); has != c.hint || !errors.Is(got, c.err) {
			t.Errorf("%s %q: %q; want the hint %v and the error kept", c.role, c.err, got, c.hint)
		}
	}
}
