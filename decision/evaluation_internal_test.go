package decision

import (
	"bytes"
	"testing"
)

// TestLeafCanonical: the hand-written leaf encoding is the canonical JSON
// of the leaf, escapes and non-ASCII included.
func TestLeafCanonical(t *testing.T) {
	for _, l := range []EvaluationLeaf{
		{Ignored: []string{}},
		{Index: 7, RequestDigest: "sha256:ab", Decision: true, Reason: "editor_may_change_own_todo", ContextDigest: EmptyContextDigest, Ignored: []string{}},
		{Index: 123456, RequestDigest: "x\"y\\z\n\t\u0001", Reason: "é€😀\u2028</script>", ContextDigest: "c\u0000", Ignored: []string{"subject._note", "é\"😀"}},
	} {
		want, err := CanonicalJSON(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.canonical(); !bytes.Equal(got, want) {
			t.Errorf("leaf %+v:\n got %s\nwant %s", l, got, want)
		}
	}
}
