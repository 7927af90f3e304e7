// Command tlogproofcheck checks a C2SP tlog-proof offline with code that
// is not callerauth's: transparency-dev/formats reads the proof and the
// checkpoint and checks its signatures (the log's, and the witnesses'
// cosignature/v1), transparency-dev/merkle checks the inclusion proof.
// The entry is the proof's extra data (callerauth decisions proof puts
// it there); its leaf hash is RFC 6962's.
//
//	tlogproofcheck --log-key VKEY [--witness-key VKEY ...] [--quorum K] PROOF
//
// It prints what holds and exits 0, or prints why not and exits 1.
package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/formats/proof"
	mproof "github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

type keys []string

func (k *keys) String() string     { return strings.Join(*k, ",") }
func (k *keys) Set(v string) error { *k = append(*k, v); return nil }

func main() {
	logKey := flag.String("log-key", "", "the log's verifier key")
	var witnessKeys keys
	flag.Var(&witnessKeys, "witness-key", "a witness's verifier key (repeat)")
	quorum := flag.Int("quorum", 0, "the witness cosignatures required (default: every witness given)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tlogproofcheck --log-key VKEY [--witness-key VKEY ...] [--quorum K] PROOF")
		os.Exit(2)
	}
	msg, err := check(flag.Arg(0), *logKey, witnessKeys, *quorum)
	if err != nil {
		fmt.Println("tlogproofcheck: refused:", err)
		os.Exit(1)
	}
	fmt.Println("tlogproofcheck: ok:", msg)
}

func check(path, logKey string, witnessKeys []string, quorum int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var p proof.TLogProof
	if err := p.Unmarshal(b); err != nil {
		return "", err
	}
	lv, err := note.NewVerifier(logKey)
	if err != nil {
		return "", fmt.Errorf("the log key: %w", err)
	}
	var wvs []note.Verifier
	for _, k := range witnessKeys {
		if !strings.Contains(k, "+") {
			return "", errors.New("a witness key: want name+hash+key")
		}
		v, err := fnote.NewVerifierForCosignatureV1(k)
		if err != nil {
			return "", fmt.Errorf("witness key %s: %w", k, err)
		}
		wvs = append(wvs, v)
	}
	if quorum == 0 {
		quorum = len(wvs)
	}
	cp, _, n, err := log.ParseCheckpoint(p.Checkpoint, lv.Name(), lv, wvs...)
	if err != nil {
		return "", err
	}
	var cosigners []string
	for _, s := range n.Sigs {
		for _, v := range wvs {
			if s.Name == v.Name() && s.Hash == v.KeyHash() {
				cosigners = append(cosigners, s.Name)
			}
		}
	}
	if len(cosigners) < quorum {
		return "", fmt.Errorf("%d witness cosignatures, %d required", len(cosigners), quorum)
	}
	if len(p.ExtraData) == 0 {
		return "", errors.New("no entry (extra data)")
	}
	leaf := rfc6962.DefaultHasher.HashLeaf(p.ExtraData)
	hashes := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		hashes[i] = p.Hashes[i][:]
	}
	if err := mproof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, cp.Size, leaf, hashes, cp.Hash); err != nil {
		return "", fmt.Errorf("entry %d in the tree of %d: %w", p.Index, cp.Size, err)
	}
	return fmt.Sprintf("entry %d (sha256 %x) is in %s's tree of %d, cosigned by %s", p.Index, sha256.Sum256(p.ExtraData), cp.Origin, cp.Size, strings.Join(cosigners, ", ")), nil
}
