package oidc

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors export what the key sets did, read when scraped: a service
// that verifies offline (the oidc backend, --caller-review-interval,
// --caller-watch-bound-objects, the vmafx controller's tenants) registers them.
//
// and the per-issuer series in the API server's shape:
//
//	<prefix>_caller_jwt_authenticator_latency_seconds{result, jwt_issuer_hash}
//	<prefix>_caller_jwt_authenticator_jwks_fetch_last_timestamp_seconds{result, jwt_issuer_hash}
func (o *Authenticator) Collectors(prefix string) []prometheus.Collector {
	m := newIssuerMetrics(prefix)
	o.useMetrics(m)
	return append(keySetCollectors(prefix, o.Stats), m.collectors()...)
}

func keySetCollectors(prefix string, stats func() Stats) []prometheus.Collector {
	counter := func(name, help string, f func(Stats) uint64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + name, Help: help, ConstLabels: labels}, func() float64 { return float64(f(stats())) })
	}
	fetchHelp := "JWKS (and discovery) fetches of the trusted issuers, by result."
	return []prometheus.Collector{
		counter("_caller_jwks_fetches_total", fetchHelp, func(s Stats) uint64 { return s.Fetches - s.FetchFailures }, prometheus.Labels{"result": "ok"}),
		counter("_caller_jwks_fetches_total", fetchHelp, func(s Stats) uint64 { return s.FetchFailures }, prometheus.Labels{"result": "error"}),
		counter("_caller_jwks_keys_ignored_total", "JWKS entries ignored as unusable (unknown kty or curve, missing members, bad x5c, RSA under 2048 bits, private or symmetric keys), each counted once; the log names the issuer and the reason.",
			func(s Stats) uint64 { return s.KeysIgnored }, nil),
		counter("_caller_jwks_stale_refusals_total", "Verifications answered validator_unavailable because every JWKS fetch has failed for longer than --caller-keys-max-stale.",
			func(s Stats) uint64 { return s.StaleRefusals }, nil),
		counter("_caller_jwks_unknown_kid_total", "Tokens naming a key id not among the fetched keys while they may not be fetched again yet: refused signing_key_unknown (retryable, never cached, never failed open; validator_unavailable when the last fetch failed).",
			func(s Stats) uint64 { return s.UnknownKid }, nil),
		counter("_caller_jwks_signature_refetches_total", "Tokens whose signature failed under the keys of their kid (or under every key, without a kid), by result: fetched (the keys were fetched again and tried once more: an issuer rotating a key under the same kid), limited (refused token_invalid, not cached, because a fetch ran less than the refresh interval before): a rising count outside a rotation is forged tokens.",
			func(s Stats) uint64 { return s.SignatureRefetches }, prometheus.Labels{"result": "fetched"}),
		counter("_caller_jwks_signature_refetches_total", "Tokens whose signature failed under the keys of their kid (or under every key, without a kid), by result: fetched (the keys were fetched again and tried once more: an issuer rotating a key under the same kid), limited (refused token_invalid, not cached, because a fetch ran less than the refresh interval before): a rising count outside a rotation is forged tokens.",
			func(s Stats) uint64 { return s.SignatureRefetchesLimited }, prometheus.Labels{"result": "limited"}),
	}
}

// add sums two counts.
func (s Stats) add(o Stats) Stats {
	return Stats{Fetches: s.Fetches + o.Fetches, FetchFailures: s.FetchFailures + o.FetchFailures, KeysIgnored: s.KeysIgnored + o.KeysIgnored,
		StaleRefusals: s.StaleRefusals + o.StaleRefusals, UnknownKid: s.UnknownKid + o.UnknownKid,
		SignatureRefetches: s.SignatureRefetches + o.SignatureRefetches, SignatureRefetchesLimited: s.SignatureRefetchesLimited + o.SignatureRefetchesLimited}
}

// issuerMetrics are the per-issuer series, in the API server's shape
// (apiserver_authentication_jwt_authenticator_*): the issuer named by the
// SHA-256 of its URL, as the API server names it.
type issuerMetrics struct {
	latency *prometheus.HistogramVec
	fetch   *prometheus.GaugeVec
}

func newIssuerMetrics(prefix string) *issuerMetrics {
	return &issuerMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "_caller_jwt_authenticator_latency_seconds",
			Help:    "Time to verify one token of a configured issuer, by result (success or failure) and issuer (jwt_issuer_hash: sha256 of its URL). Verdict-cache hits are not verifications.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"result", "jwt_issuer_hash"}),
		fetch: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: prefix + "_caller_jwt_authenticator_jwks_fetch_last_timestamp_seconds",
			Help: "When the keys of an issuer were last fetched (discovery and JWKS), by result (success or failure) and issuer (jwt_issuer_hash)."}, []string{"result", "jwt_issuer_hash"}),
	}
}

func (m *issuerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.latency, m.fetch}
}

// series are one issuer's children of the latency histogram, resolved
// once.
type series struct {
	success, failure prometheus.Observer
}

func (m *issuerMetrics) seriesOf(hash string) *series {
	return &series{success: m.latency.WithLabelValues("success", hash), failure: m.latency.WithLabelValues("failure", hash)}
}

func (m *issuerMetrics) fetched(hash string, ok bool, at time.Time) {
	result := "success"
	if !ok {
		result = "failure"
	}
	m.fetch.WithLabelValues(result, hash).Set(float64(at.UnixNano()) / 1e9)
}

// forget drops an issuer's series (a reload removed it).
func (m *issuerMetrics) forget(hash string) {
	for _, result := range []string{"success", "failure"} {
		m.latency.DeleteLabelValues(result, hash)
		m.fetch.DeleteLabelValues(result, hash)
	}
}

// issuerHash names an issuer in metric labels as the API server does.
func issuerHash(issuer string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(issuer)))
}
