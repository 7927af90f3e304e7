package decisionlog

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/note"

	"github.com/callerauth/callerauth/credentials"
	"github.com/callerauth/callerauth/internal/foundation/datastore"
	"github.com/callerauth/callerauth/internal/foundation/fsutil"
	"github.com/callerauth/callerauth/internal/foundation/translog"
)

// The modes (--decision-log-mode).
const (
	// ModeRequired: an answer leaves only once its decision is durable
	// in the log (written and fdatasync'd); refusals are kept as the log
	// has room.
	ModeRequired = "required"
	// ModeBestEffort: decisions are queued for the log and answered at
	// once; what the queue has no room for is dropped and counted. The
	// log syncs before each checkpoint.
	ModeBestEffort = "best-effort"
)

// Options are the decision log's settings, as flags.
type Options struct {
	// Dir is the log's directory; empty: no log.
	Dir string
	// Search is the search index: an SQLite file or a postgres:// URL
	// that replicas share; empty: Dir/search.db. SearchURLFile holds it
	// instead (a mounted Secret).
	Search, SearchURLFile string
	// KeyFile holds the checkpoint key (callerauth decisions checkpoint-key):
	// its name is the log's origin.
	KeyFile string
	// Replica, when set, makes the origin KEYNAME/REPLICA: replicas that
	// share a key keep logs of their own.
	Replica string
	// Mode is ModeRequired or ModeBestEffort.
	Mode string
	// MaxAge and MaxEntries are the retention (translog.Retention).
	MaxAge     time.Duration
	MaxEntries int64
	// CallerMaxEntries is each caller's quota of entries within the
	// retention (the unauthenticated share one).
	CallerMaxEntries int64
	// Queue bounds the entries waiting for a write.
	Queue int
	// SignEvery is the checkpoint cadence.
	SignEvery time.Duration
	// WitnessesFile is the witness policy (translog.ParseWitnessPolicy):
	// the witnesses each checkpoint goes to; empty: none.
	// WitnessCAFile is the CA bundle their certificates are checked
	// against (default: the system roots).
	WitnessesFile, WitnessCAFile string
	// Sink ships committed decisions in OPA's decision-log format;
	// empty: none. SinkCAFile and SinkTokenFile are its TLS roots and
	// bearer token; SinkBuffer bounds what waits, SinkEvery how often it
	// is sent.
	Sink, SinkCAFile, SinkTokenFile string
	SinkBuffer                      int
	SinkEvery                       time.Duration
}

// NewOptions are the defaults: no log; when one is named, required,
// 30 days, 10 million entries, 1 million a caller, a checkpoint a second.
func NewOptions() Options {
	return Options{Mode: ModeRequired, MaxAge: 30 * 24 * time.Hour, MaxEntries: 10_000_000, CallerMaxEntries: 1_000_000,
		Queue: translog.DefaultMaxQueue, SignEvery: translog.DefaultSignEvery, SinkBuffer: 10_000, SinkEvery: 5 * time.Second}
}

// AddFlags registers the settings.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Dir, "decision-log", o.Dir, "keep every decision in a tamper-evident log in this directory (created 0700; one process's alone; docs/decision-log.md); empty: no log")
	f.StringVar(&o.Search, "decision-log-search", o.Search, "the log's search index: an SQLite file, or a postgres:// URL that replicas share (default: search.db in the --decision-log directory)")
	f.StringVar(&o.SearchURLFile, "decision-log-search-url-file", o.SearchURLFile, "read --decision-log-search from this file (a mounted Secret: the URL may then carry the password without showing in the process's arguments)")
	f.StringVar(&o.KeyFile, "decision-log-key-file", o.KeyFile, "the key that signs the log's checkpoints, as `callerauth decisions checkpoint-key` writes it; its name is the log's origin. Required with --decision-log")
	f.StringVar(&o.Replica, "decision-log-replica", o.Replica, "this replica's name: the log's origin becomes KEYNAME/REPLICA, so that replicas sharing one key keep logs of their own (a pod's name)")
	f.StringVar(&o.Mode, "decision-log-mode", o.Mode, "required: an answer leaves only once its decision is written and synced to the log (else 503 decision_log_unavailable); best-effort: decisions are queued and what finds no room is dropped and counted")
	f.DurationVar(&o.MaxAge, "decision-log-max-age", o.MaxAge, "how long a decision is kept; older ones are pruned, 256 at a time (0: no age bound)")
	f.Int64Var(&o.MaxEntries, "decision-log-max-entries", o.MaxEntries, "the most decisions the log holds; past it the oldest are pruned, 256 at a time, even before --decision-log-max-age")
	f.Int64Var(&o.CallerMaxEntries, "decision-log-caller-max-entries", o.CallerMaxEntries, "the most decisions one caller may hold in the log; past it the caller's requests are refused 429 decision_log_quota_exceeded until older ones age out, so that its flood cannot push out other callers' history")
	f.IntVar(&o.Queue, "decision-log-queue", o.Queue, "decisions waiting for a write at most; past it a decision is refused (required) or dropped (best-effort)")
	f.DurationVar(&o.SignEvery, "decision-log-sign-every", o.SignEvery, "how often a checkpoint is signed while the log grows (and once on stop)")
	f.StringVar(&o.WitnessesFile, "decision-log-witnesses", o.WitnessesFile, "a witness policy file: each checkpoint goes to these witnesses (C2SP tlog-witness), whose cosignatures the log keeps and serves; lines \"witness <verifier key> <url>\" and \"quorum <k>\" (docs/decision-log.md#witnesses). Never on a decision's path")
	f.StringVar(&o.WitnessCAFile, "decision-log-witness-ca-file", o.WitnessCAFile, "CA bundle (PEM) the witnesses' certificates are checked against (default: the system roots)")
	f.StringVar(&o.Sink, "decision-log-sink", o.Sink, "also ship every decision the log keeps to this URL in OPA's decision-log format (POSTs of gzip-compressed JSON arrays, as OPA's decision_logs service receives them): https://, or http:// to a loopback address without a token")
	f.StringVar(&o.SinkCAFile, "decision-log-sink-ca-file", o.SinkCAFile, "CA bundle (PEM) the sink's certificate is checked against (default: the system roots)")
	f.StringVar(&o.SinkTokenFile, "decision-log-sink-token-file", o.SinkTokenFile, "a bearer token for the sink, read again on every POST")
	f.IntVar(&o.SinkBuffer, "decision-log-sink-buffer", o.SinkBuffer, "decisions waiting to be shipped at most; past it they are dropped from the shipping (never from the log) and counted")
	f.DurationVar(&o.SinkEvery, "decision-log-sink-every", o.SinkEvery, "how often what waits is shipped (a full batch of 500 at once); a failed POST is retried with backoff up to a minute")
}

// On reports whether a log is asked for.
func (o Options) On() bool { return o.Dir != "" }

// Check refuses settings that cannot be honoured, naming the flag. It
// reads nothing (Complete does).
func (o Options) Check() error {
	if !o.On() {
		for _, c := range []struct {
			flag string
			set  bool
		}{{"decision-log-key-file", o.KeyFile != ""}, {"decision-log-sink", o.Sink != ""}, {"decision-log-search", o.Search != ""},
			{"decision-log-search-url-file", o.SearchURLFile != ""}, {"decision-log-replica", o.Replica != ""},
			{"decision-log-witnesses", o.WitnessesFile != ""}, {"decision-log-witness-ca-file", o.WitnessCAFile != ""}} {
			if c.set {
				return fmt.Errorf("--%s belongs to --decision-log", c.flag)
			}
		}
		return nil
	}
	var errs []error
	if o.KeyFile == "" {
		errs = append(errs, errors.New("--decision-log needs --decision-log-key-file: the key that signs its checkpoints (callerauth decisions checkpoint-key writes one)"))
	}
	if o.Mode != ModeRequired && o.Mode != ModeBestEffort {
		errs = append(errs, fmt.Errorf("--decision-log-mode %q: want required or best-effort", o.Mode))
	}
	if o.MaxAge < 0 || o.MaxEntries < 0 {
		errs = append(errs, errors.New("--decision-log-max-age and --decision-log-max-entries: want 0 (no bound) or more"))
	}
	if o.CallerMaxEntries <= 0 {
		errs = append(errs, fmt.Errorf("--decision-log-caller-max-entries %d: want a positive number", o.CallerMaxEntries))
	}
	if o.Queue <= 0 {
		errs = append(errs, fmt.Errorf("--decision-log-queue %d: want a positive number", o.Queue))
	}
	if o.SignEvery <= 0 {
		errs = append(errs, fmt.Errorf("--decision-log-sign-every %s: want a positive duration", o.SignEvery))
	}
	if o.Search != "" && o.SearchURLFile != "" {
		errs = append(errs, errors.New("--decision-log-search and --decision-log-search-url-file: give one"))
	}
	if o.Replica != "" {
		if err := translog.CheckOrigin("x/" + o.Replica); err != nil || strings.Contains(o.Replica, "/") {
			errs = append(errs, fmt.Errorf("--decision-log-replica %q: want a name with no space, slash or plus sign", o.Replica))
		}
	}
	if o.Sink != "" {
		if _, err := o.sinkCredentials(); err != nil {
			errs = append(errs, err)
		}
		if o.SinkBuffer <= 0 || o.SinkEvery <= 0 {
			errs = append(errs, errors.New("--decision-log-sink-buffer and --decision-log-sink-every: want positive values"))
		}
	} else if o.SinkCAFile != "" || o.SinkTokenFile != "" {
		errs = append(errs, errors.New("--decision-log-sink-ca-file and --decision-log-sink-token-file belong to --decision-log-sink"))
	}
	if o.WitnessCAFile != "" && o.WitnessesFile == "" {
		errs = append(errs, errors.New("--decision-log-witness-ca-file belongs to --decision-log-witnesses"))
	}
	return errors.Join(errs...)
}

// sinkCredentials reads --decision-log-sink into the credentials
// package's configuration: https:// with TLS, or http:// to a loopback
// address, where no token may go.
func (o Options) sinkCredentials() (credentials.Config, error) {
	u, err := url.Parse(o.Sink)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: want an https:// URL (or http:// to a loopback address)", o.Sink)
	}
	c := credentials.Config{Address: u.Host, TLS: u.Scheme == "https", CAFile: o.SinkCAFile, TokenFile: o.SinkTokenFile}
	if !c.TLS {
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: plain http:// only to a loopback address: the decisions name callers", o.Sink)
		}
		if o.SinkCAFile != "" || o.SinkTokenFile != "" {
			return credentials.Config{}, fmt.Errorf("--decision-log-sink %q: a CA file or a token needs https://", o.Sink)
		}
	}
	return c, c.Validate()
}

// Config is Options completed: checked, the key read and named, the
// search index and the sink resolved. It is what Open takes; a service
// completes its options once, at start-up.
type Config struct {
	Options
	// Key is the checkpoint key, named Origin.
	Key string
	// Origin is the log's origin (the key's name, and /Replica).
	Origin string
	// SearchTarget is the search index's datastore target.
	SearchTarget string
	// SinkURL and SinkClient ship to the sink; nil: none.
	SinkURL    *url.URL
	SinkClient credentials.Config
	// Witnesses is the witness policy read (no witness: none), and
	// WitnessClient the client that reaches them.
	Witnesses     translog.WitnessPolicy
	WitnessClient *http.Client
}

// Complete checks o and reads what it names. The zero Config (On false)
// when o asks for no log.
func (o Options) Complete() (Config, error) {
	if err := o.Check(); err != nil || !o.On() {
		return Config{}, err
	}
	b, err := os.ReadFile(o.KeyFile)
	if err != nil {
		return Config{}, fmt.Errorf("--decision-log-key-file: %w", err)
	}
	skey := strings.TrimSpace(string(b))
	signer, _, _, err := translog.Keys(skey)
	if err != nil {
		return Config{}, fmt.Errorf("--decision-log-key-file %s: %w", o.KeyFile, err)
	}
	c := Config{Options: o, Key: skey, Origin: signer.Name()}
	if o.Replica != "" {
		c.Origin += "/" + o.Replica
		if c.Key, err = renameKey(skey, c.Origin); err != nil {
			return Config{}, fmt.Errorf("--decision-log-replica: %w", err)
		}
	}
	c.SearchTarget = o.Search
	if o.SearchURLFile != "" {
		if c.SearchTarget, err = datastore.Resolve("", o.SearchURLFile); err != nil {
			return Config{}, fmt.Errorf("--decision-log-search-url-file: %w", err)
		}
	}
	if c.SearchTarget == "" {
		c.SearchTarget = filepath.Join(o.Dir, "search.db")
	}
	if _, _, err := datastore.Parse(c.SearchTarget); err != nil {
		return Config{}, fmt.Errorf("--decision-log-search: %w", err)
	}
	if o.Sink != "" {
		if c.SinkClient, err = o.sinkCredentials(); err != nil {
			return Config{}, err
		}
		c.SinkURL, _ = url.Parse(o.Sink) // checked by sinkCredentials
	}
	if o.WitnessesFile != "" {
		b, err := fsutil.ReadFlagFile("--decision-log-witnesses", o.WitnessesFile, 64<<10)
		if err != nil {
			return Config{}, err
		}
		if c.Witnesses, err = translog.ParseWitnessPolicy(b); err != nil {
			return Config{}, fmt.Errorf("--decision-log-witnesses %s: %w", o.WitnessesFile, err)
		}
		for _, w := range c.Witnesses.Witnesses {
			if w.URL == "" {
				return Config{}, fmt.Errorf("--decision-log-witnesses %s: witness %s has no URL: the log sends it checkpoints", o.WitnessesFile, w.Name)
			}
		}
		tlsc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.WitnessCAFile != "" {
			if tlsc.RootCAs, err = fsutil.ReadCAs("--decision-log-witness-ca-file", o.WitnessCAFile); err != nil {
				return Config{}, err
			}
		}
		c.WitnessClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsc, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return c, nil
}

// renameKey is the Ed25519 note signer key skey under another name: its
// key hash is the one x/mod's note gives the same public key under it.
func renameKey(skey, name string) (string, error) {
	f := strings.SplitN(skey, "+", 5)
	_, _, vkey, err := translog.Keys(skey)
	if err != nil || len(f) != 5 {
		return "", errors.New("not an Ed25519 note signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.SplitN(vkey, "+", 3)[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize {
		return "", errors.New("not an Ed25519 note signer key")
	}
	renamedV, err := note.NewEd25519VerifierKey(name, ed25519.PublicKey(raw[1:]))
	if err != nil {
		return "", err
	}
	renamed := "PRIVATE+KEY+" + name + "+" + strings.SplitN(renamedV, "+", 3)[1] + "+" + f[4]
	if _, _, _, err := translog.Keys(renamed); err != nil {
		return "", fmt.Errorf("the key renamed %q: %w", name, err)
	}
	return renamed, nil
}

// ReplicaVerifierKey is the verifier key of replica's log (its origin
// KEYNAME/REPLICA, --decision-log-replica) from the verifier key keygen
// printed: what an auditor checks that replica's checkpoints with.
func ReplicaVerifierKey(vkey, replica string) (string, error) {
	v := strings.SplitN(vkey, "+", 3)
	if _, err := note.NewVerifier(vkey); err != nil || len(v) != 3 {
		return "", errors.New("not a verifier key (name+hash+key, as callerauth decisions checkpoint-key prints it)")
	}
	raw, err := base64.StdEncoding.DecodeString(v[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return "", errors.New("not an Ed25519 verifier key")
	}
	return note.NewEd25519VerifierKey(v[0]+"/"+replica, ed25519.PublicKey(raw[1:]))
}
