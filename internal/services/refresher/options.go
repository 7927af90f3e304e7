package refresher

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/callerauth/callerauth/internal/foundation/fsutil"
)

// Options are the refresher's flags.
type Options struct {
	// TokenURL is the identity provider's token endpoint (https).
	TokenURL string
	// ClientID and SecretFile are the OAuth2 client's id and the file
	// holding its secret.
	ClientID, SecretFile string
	// Scopes and Audience are asked for (none: what the client is
	// granted; its default audience).
	Scopes   []string
	Audience string
	// Out is the token file kept current (written atomically, 0600).
	Out string
	// CAFile is the token endpoint's CA bundle (empty: the system roots).
	CAFile string
	// RenewAt is the fraction of a token's lifetime after which it is
	// renewed.
	RenewAt float64
	// Once fetches one token, writes it and returns.
	Once bool
}

// NewOptions returns the defaults: the one place they are written.
func NewOptions() Options { return Options{RenewAt: 0.75} }

// AddFlags registers the refresher's flags, with o's values as their
// defaults.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.TokenURL, "token-url", o.TokenURL, "the identity provider's token endpoint (https)")
	f.StringVar(&o.ClientID, "client-id", o.ClientID, "the OAuth2 client id")
	f.StringVar(&o.SecretFile, "client-secret-file", o.SecretFile, "file holding the client secret")
	f.StringArrayVar(&o.Scopes, "scope", o.Scopes, "scope to ask for (repeatable; default: what the client is granted)")
	f.StringVar(&o.Audience, "audience", o.Audience, "audience to ask for (the service the token is for)")
	f.StringVar(&o.Out, "out", o.Out, "the token file to keep current (written atomically, mode 0600)")
	f.StringVar(&o.CAFile, "ca-file", o.CAFile, "CA bundle for the token endpoint (default: the system roots)")
	f.Float64Var(&o.RenewAt, "renew-at", o.RenewAt, "renew when this fraction of the token's lifetime has passed")
	f.BoolVar(&o.Once, "once", o.Once, "fetch one token, write it and exit")
}

// Validate refuses options that cannot be honoured: what
// [Options.Complete] refuses.
func (o Options) Validate() error {
	_, err := o.Complete()
	return err
}

// Config is the completed configuration [Run] reads.
type Config struct {
	grant   clientcredentials.Config
	client  *http.Client
	out     string
	renewAt float64
	once    bool
}

// Complete validates the options — each refusal naming its flag — and
// reads the secret and the CA bundle.
func (o Options) Complete() (Config, error) {
	var errs []error
	for _, req := range []struct{ flag, v string }{{"--token-url", o.TokenURL}, {"--client-id", o.ClientID}, {"--client-secret-file", o.SecretFile}, {"--out", o.Out}} {
		if req.v == "" {
			errs = append(errs, fmt.Errorf("%s is required", req.flag))
		}
	}
	if u, err := url.Parse(o.TokenURL); o.TokenURL != "" && (err != nil || u.Scheme != "https" || u.Host == "") {
		errs = append(errs, fmt.Errorf("--token-url %q: want an https:// URL (a client secret never travels in clear)", o.TokenURL))
	}
	if !(o.RenewAt > 0 && o.RenewAt < 1) { // NaN too
		errs = append(errs, fmt.Errorf("--renew-at %v: want a fraction of the lifetime between 0 and 1", o.RenewAt))
	}
	var secret []byte
	if o.SecretFile != "" {
		var err error
		if secret, err = fsutil.ReadFlagFile("--client-secret-file", o.SecretFile, MaxSecretBytes); err != nil {
			errs = append(errs, err)
		}
	}
	hc := &http.Client{Timeout: requestTimeout}
	if o.CAFile != "" {
		pool, err := fsutil.ReadCAs("--ca-file", o.CAFile)
		if err != nil {
			errs = append(errs, err)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	cc := clientcredentials.Config{ClientID: o.ClientID, ClientSecret: strings.TrimSpace(string(secret)), TokenURL: o.TokenURL,
		Scopes: o.Scopes, AuthStyle: oauth2.AuthStyleInHeader}
	if o.Audience != "" {
		cc.EndpointParams = url.Values{"audience": {o.Audience}}
	}
	return Config{grant: cc, client: hc, out: o.Out, renewAt: o.RenewAt, once: o.Once}, nil
}
