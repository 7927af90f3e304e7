package images

import (
	"debug/buildinfo"
	"runtime/debug"
	"testing"
)

// TestDirtyBuildsAreMarked: a binary built from a tree with uncommitted
// changes makes an image whose tag and revision label say so; a clean one
// keeps the tag it was given.
func TestDirtyBuildsAreMarked(t *testing.T) {
	info := func(modified string) *buildinfo.BuildInfo {
		return &buildinfo.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, c := range []struct {
		modified, tag, wantTag, wantRevision string
	}{
		{"false", "0.1.0", "0.1.0", "abc123"},
		{"true", "0.1.0", "0.1.0-dirty", "abc123-dirty"},
		{"true", "0.1.0-dirty", "0.1.0-dirty", "abc123-dirty"},
	} {
		i := info(c.modified)
		if got := dirtyTag(c.tag, i); got != c.wantTag {
			t.Errorf("modified %s, tag %s: %s, want %s", c.modified, c.tag, got, c.wantTag)
		}
		if got := revision(i); got != c.wantRevision {
			t.Errorf("modified %s: revision %s, want %s", c.modified, got, c.wantRevision)
		}
	}
	if got := dirtyTag("0.1.0", &buildinfo.BuildInfo{}); got != "0.1.0" {
		t.Errorf("no version control information: %s", got)
	}
}
