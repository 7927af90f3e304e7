package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

func leaves(n int) [][sha256.Size]byte {
	out := make([][sha256.Size]byte, n)
	for i := range out {
		out[i] = leafHash([]byte(fmt.Sprint(i)))
	}
	return out
}

// TestMerkleRFC9162Shape checks the tree's shape against RFC 9162's
// definition written out by hand for three leaves: MTH({d0,d1,d2}) =
// H(1 || MTH({d0,d1}) || MTH({d2})).
func TestMerkleRFC9162Shape(t *testing.T) {
	l := leaves(3)
	want := nodeHash(nodeHash(l[0], l[1]), l[2])
	if got := merkleRoot(l); got != want {
		t.Fatalf("root of three leaves %x, want %x", got, want)
	}
	empty := leafHash(nil)
	// RFC 9162 2.1.1: the hash of an empty leaf is SHA-256(0x00).
	if hex.EncodeToString(empty[:]) != "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d" {
		t.Fatalf("leaf hash of the empty string %x", empty)
	}
}

// TestMerkleEveryLeafProves: for trees of 1 to 33 leaves, every leaf's
// proof leads to the root; another leaf, another index or a changed proof
// does not. (The size is not the proof's to prove: the signed record
// states it.)
func TestMerkleEveryLeafProves(t *testing.T) {
	for n := 1; n <= 33; n++ {
		l := leaves(n)
		root := merkleRoot(l)
		for m := range n {
			proof := inclusionProof(m, l)
			got, err := rootFromProof(m, n, l[m], proof)
			if err != nil || got != root {
				t.Fatalf("n=%d m=%d: %v, root %x want %x", n, m, err, got, root)
			}
			if n > 1 {
				other := (m + 1) % n
				if got, err := rootFromProof(m, n, l[other], proof); err == nil && got == root {
					t.Fatalf("n=%d m=%d: leaf %d proves at index %d", n, m, other, m)
				}
				if got, err := rootFromProof(other, n, l[m], proof); err == nil && got == root {
					t.Fatalf("n=%d m=%d: the proof also works at index %d", n, m, other)
				}
				bad := append([][sha256.Size]byte{}, proof...)
				bad[0][0] ^= 1
				if got, err := rootFromProof(m, n, l[m], bad); err == nil && got == root {
					t.Fatalf("n=%d m=%d: a changed proof still leads to the root", n, m)
				}
			}
			if _, err := rootFromProof(m, n, l[m], append(proof, root)); err == nil {
				t.Fatalf("n=%d m=%d: a proof with a hash too many is accepted", n, m)
			}
		}
		if _, err := rootFromProof(n, n, l[0], nil); err == nil {
			t.Fatalf("n=%d: an index past the end is accepted", n)
		}
	}
}
