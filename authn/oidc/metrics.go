package oidc

import "github.com/prometheus/client_golang/prometheus"

// Collectors export what the key sets did, read when scraped: a service
// that verifies offline (the oidc backend, --caller-review-interval,
// --caller-watch-bound-objects, the vmafx controller's tenants) registers them.
func (o *Authenticator) Collectors(prefix string) []prometheus.Collector {
	return keySetCollectors(prefix, o.Stats)
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
		counter("_caller_jwks_unknown_kid_total", "Tokens naming a key id not among the fetched keys, answered validator_unavailable (retryable) until the keys may be fetched again.",
			func(s Stats) uint64 { return s.UnknownKid }, nil),
	}
}

// add sums two counts.
func (s Stats) add(o Stats) Stats {
	return Stats{Fetches: s.Fetches + o.Fetches, FetchFailures: s.FetchFailures + o.FetchFailures, KeysIgnored: s.KeysIgnored + o.KeysIgnored,
		StaleRefusals: s.StaleRefusals + o.StaleRefusals, UnknownKid: s.UnknownKid + o.UnknownKid}
}
