package decision

import (
	"crypto/sha256"
	"errors"
	"math/bits"
)

// The Merkle tree of a batch of evaluations is RFC 9162's (section 2.1,
// as RFC 6962's): a leaf hashes 0x00 || leaf, an interior node 0x01 ||
// left || right, and a tree of n leaves splits at the largest power of two
// below n. One signature over the root covers every leaf; an inclusion
// proof of about log2(n) hashes shows that one leaf is in it.

func leafHash(leaf []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(leaf)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func nodeHash(left, right [sha256.Size]byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte{1})
	h.Write(left[:])
	h.Write(right[:])
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// split is the largest power of two smaller than n (n > 1).
func split(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// tree memoizes a Merkle tree's subtree hashes, so that the root and every
// leaf's proof together cost the tree's 2n-1 hashes, not n per proof.
type tree struct {
	leaves [][sha256.Size]byte
	memo   map[[2]int][sha256.Size]byte
}

func newTree(leaves [][sha256.Size]byte) *tree {
	return &tree{leaves: leaves, memo: make(map[[2]int][sha256.Size]byte, len(leaves))}
}

// hash is the tree hash of leaves[lo:hi].
func (t *tree) hash(lo, hi int) [sha256.Size]byte {
	if hi-lo == 1 {
		return t.leaves[lo]
	}
	if h, ok := t.memo[[2]int{lo, hi}]; ok {
		return h
	}
	k := split(hi - lo)
	h := nodeHash(t.hash(lo, lo+k), t.hash(lo+k, hi))
	t.memo[[2]int{lo, hi}] = h
	return h
}

// proof is the audit path of leaf m within leaves[lo:hi], from the leaf up.
func (t *tree) proof(m, lo, hi int) [][sha256.Size]byte {
	if hi-lo == 1 {
		return nil
	}
	k := split(hi - lo)
	if m < lo+k {
		return append(t.proof(m, lo, lo+k), t.hash(lo+k, hi))
	}
	return append(t.proof(m, lo+k, hi), t.hash(lo, lo+k))
}

// merkleRoot is the tree hash of the leaf hashes.
func merkleRoot(leaves [][sha256.Size]byte) [sha256.Size]byte {
	return newTree(leaves).hash(0, len(leaves))
}

// inclusionProof is the audit path of leaf m, from the leaf up.
func inclusionProof(m int, leaves [][sha256.Size]byte) [][sha256.Size]byte {
	return newTree(leaves).proof(m, 0, len(leaves))
}

var errProof = errors.New("the inclusion proof does not lead to the signed root")

// rootFromProof recomputes the root from leaf index (of size leaves) and
// its audit path, as RFC 9162 section 2.1.3.2 verifies an inclusion proof.
func rootFromProof(index, size int, leaf [sha256.Size]byte, proof [][sha256.Size]byte) ([sha256.Size]byte, error) {
	if index < 0 || index >= size {
		return leaf, errProof
	}
	fn, sn := index, size-1
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return leaf, errProof
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return leaf, errProof
	}
	return r, nil
}
