package connector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostDirs: a directory gets the mode and the owner (here the test's
// own, which any user may give); a file, a symbolic link, a missing path
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
