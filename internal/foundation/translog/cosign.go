package translog

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Witnesses: a log's checkpoints are worth more once others have seen
// them. A witness (C2SP tlog-witness) checks that each checkpoint it is
// given extends the last it saw, and cosigns it (C2SP tlog-cosignature,
// cosignature/v1, Ed25519).

// Key types of a signed-note verifier key (C2SP signed-note).
const (
	keyEd25519     = 0x01
	keyCosignature = 0x04
)

// MaxWitnesses bounds a policy's witnesses.
const MaxWitnesses = 32

// Witness is one witness: its verifier key and where it takes
// checkpoints.
type Witness struct {
	// Name is the key's name, the name on its cosignatures.
	Name string
	// Key is its verifier key: name+hash+base64 of 0x04 (or 0x01) and
	// its Ed25519 public key.
	Key string
	// URL is its submission prefix: checkpoints go to URL/add-checkpoint.
	// Empty where only cosignatures are checked.
	URL      string
	verifier note.Verifier
}

// WitnessPolicy is the witnesses a log's checkpoints go to and how many
// of them must cosign one for it to count as witnessed.
type WitnessPolicy struct {
	Witnesses []Witness
	// Quorum: the cosignatures a checkpoint needs, 1 to len(Witnesses).
	Quorum int
}

// ParseWitnessPolicy reads a policy file: one line a witness,
//
//	witness <verifier key> [<submission URL>]
//
// and at most one
//
//	quorum <k>
//
// (default: every witness). Blank lines and lines starting with # are
// skipped. A log needs each witness's URL (https, or http to loopback);
// a verifier does not.
func ParseWitnessPolicy(data []byte) (WitnessPolicy, error) {
	var p WitnessPolicy
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case f[0] == "witness" && (len(f) == 2 || len(f) == 3):
			w, err := NewWitness(f[1])
			if err != nil {
				return p, fmt.Errorf("line %d: %w", n, err)
			}
			if len(f) == 3 {
				if err := checkWitnessURL(f[2]); err != nil {
					return p, fmt.Errorf("line %d: %w", n, err)
				}
				w.URL = strings.TrimSuffix(f[2], "/")
			}
			if names[w.Name] {
				return p, fmt.Errorf("line %d: witness %q twice", n, w.Name)
			}
			names[w.Name] = true
			if p.Witnesses = append(p.Witnesses, w); len(p.Witnesses) > MaxWitnesses {
				return p, fmt.Errorf("line %d: more than %d witnesses", n, MaxWitnesses)
			}
		case f[0] == "quorum" && len(f) == 2 && p.Quorum == 0:
			k, err := strconv.Atoi(f[1])
			if err != nil || k < 1 {
				return p, fmt.Errorf("line %d: quorum %q: want a whole number from 1", n, f[1])
			}
			p.Quorum = k
		default:
			return p, fmt.Errorf("line %d: want \"witness <verifier key> [<url>]\" or one \"quorum <k>\"", n)
		}
	}
	if err := sc.Err(); err != nil {
		return p, err
	}
	switch {
	case len(p.Witnesses) == 0:
		return p, errors.New("no witness")
	case p.Quorum > len(p.Witnesses):
		return p, fmt.Errorf("quorum %d of %d witnesses", p.Quorum, len(p.Witnesses))
	case p.Quorum == 0:
		p.Quorum = len(p.Witnesses)
	}
	return p, nil
}

// check holds a policy given whole (not parsed) to what a log needs:
// witnesses with keys and URLs, a quorum among them.
func (p WitnessPolicy) check() error {
	if len(p.Witnesses) == 0 {
		return nil
	}
	if len(p.Witnesses) > MaxWitnesses {
		return fmt.Errorf("%d witnesses: at most %d", len(p.Witnesses), MaxWitnesses)
	}
	for _, w := range p.Witnesses {
		if w.verifier == nil {
			return fmt.Errorf("witness %q: not made by NewWitness or ParseWitnessPolicy", w.Name)
		}
		if err := checkWitnessURL(w.URL); err != nil {
			return err
		}
	}
	if p.Quorum < 1 || p.Quorum > len(p.Witnesses) {
		return fmt.Errorf("quorum %d of %d witnesses", p.Quorum, len(p.Witnesses))
	}
	return nil
}

func checkWitnessURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("witness URL %q: want https://host[/prefix]", s)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (u.Hostname() == "127.0.0.1" || u.Hostname() == "::1" || u.Hostname() == "localhost"):
	default:
		return fmt.Errorf("witness URL %q: want https (http only to loopback)", s)
	}
	return nil
}

// NewWitness reads a witness's verifier key: an Ed25519 key of type 0x04
// (a cosigner's, C2SP tlog-cosignature) or 0x01 (as the witness's own key
// tools print it; its cosignatures carry the 0x04 key ID all the same).
func NewWitness(vkey string) (Witness, error) {
	v, err := CosignatureVerifier(vkey)
	if err != nil {
		return Witness{}, err
	}
	return Witness{Name: v.Name(), Key: vkey, verifier: v}, nil
}

// CosignatureVerifier checks cosignature/v1 signatures by the Ed25519 key
// vkey names (type 0x04 or 0x01).
func CosignatureVerifier(vkey string) (note.Verifier, error) {
	f := strings.SplitN(vkey, "+", 3)
	if len(f) != 3 || len(f[1]) != 8 {
		return nil, fmt.Errorf("witness key %q: want name+hash+key", vkey)
	}
	raw, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || (raw[0] != keyCosignature && raw[0] != keyEd25519) {
		return nil, fmt.Errorf("witness key %q: want an Ed25519 key (type 0x04 or 0x01)", vkey)
	}
	if err := CheckOrigin(f[0]); err != nil {
		return nil, fmt.Errorf("witness key %q: its name: %w", vkey, err)
	}
	pub := ed25519.PublicKey(raw[1:])
	return cosignatureVerifier{name: f[0], hash: cosignatureKeyID(f[0], pub), pub: pub}, nil
}

// cosignatureKeyID is SHA-256(name || "\n" || 0x04 || key)[:4].
func cosignatureKeyID(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write([]byte{keyCosignature})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

type cosignatureVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

func (v cosignatureVerifier) Name() string    { return v.name }
func (v cosignatureVerifier) KeyHash() uint32 { return v.hash }

// Verify checks a timestamped_signature (u64 time, 64 bytes of Ed25519)
// over "cosignature/v1\ntime <t>\n" and the note's text.
func (v cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > 1<<63-1 {
		return false
	}
	m := append([]byte("cosignature/v1\ntime "+strconv.FormatUint(t, 10)+"\n"), msg...)
	return ed25519.Verify(v.pub, m, sig[8:])
}

// Cosigners opens a checkpoint note (signed by the log, whose verifier
// is log) and returns the names of the policy's witnesses whose
// cosignatures on it verify; err when the log's signature does not, or
// fewer than the quorum do. Unknown signatures are ignored.
func (p WitnessPolicy) Cosigners(checkpoint []byte, log note.Verifier) (*note.Note, []string, error) {
	vs := []note.Verifier{log}
	for _, w := range p.Witnesses {
		vs = append(vs, w.verifier)
	}
	n, err := note.Open(checkpoint, note.VerifierList(vs...))
	if err != nil {
		return nil, nil, fmt.Errorf("the checkpoint: %w", err)
	}
	var byLog bool
	var names []string
	for _, s := range n.Sigs {
		if s.Name == log.Name() && s.Hash == log.KeyHash() {
			byLog = true
			continue
		}
		names = append(names, s.Name)
	}
	switch {
	case !byLog:
		return nil, nil, fmt.Errorf("the checkpoint is not signed by %s", log.Name())
	case len(names) < p.Quorum:
		return n, names, fmt.Errorf("the checkpoint has %d of the %d witness cosignatures the policy asks for (%s)", len(names), p.Quorum, strings.Join(orNone(names), ", "))
	}
	return n, names, nil
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"none"}
	}
	return s
}
