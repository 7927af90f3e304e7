package authn

import "github.com/prometheus/client_golang/prometheus"

// Collectors export the verdict cache's size, lookups and
// verifications in flight, read from the cache when scraped.
func (c *Cache) Collectors(prefix string) []prometheus.Collector {
	stat := func(f func(CacheStats) uint64) func() float64 {
		return func() float64 { return float64(f(c.Stats())) }
	}
	lookups := func(result string, f func(CacheStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_cache_lookups_total",
			Help:        "Verdict-cache lookups by result: hit (a cached success), negative_hit (a cached token_invalid), miss (not cached: verified, or joined a running verification of the same token), shed (a miss refused as validator_unavailable because --caller-max-in-flight verifications were running; also counted as a miss), reverified (a cached success the bound-object view could no longer vouch for, verified again; also counted as a miss).",
			ConstLabels: prometheus.Labels{"result": result}}, stat(f))
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_cache_entries", Help: "Verdicts in the cache (at most --caller-cache-max-entries; the least recently used is evicted)."},
			func() float64 { return float64(c.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_cache_evictions_total", Help: "Verdicts evicted from a full cache."},
			stat(func(s CacheStats) uint64 { return s.Evictions })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_verifications_in_flight", Help: "Verifications (TokenReviews or JWKS checks) running now; at most --caller-max-in-flight."},
			func() float64 { return float64(c.InFlight()) }),
		lookups("hit", func(s CacheStats) uint64 { return s.Hits }),
		lookups("negative_hit", func(s CacheStats) uint64 { return s.NegativeHits }),
		lookups("miss", func(s CacheStats) uint64 { return s.Misses }),
		lookups("shed", func(s CacheStats) uint64 { return s.Shed }),
		lookups("reverified", func(s CacheStats) uint64 { return s.Reverified }),
	}
}

// Collectors export what the Recheck did, read from it when scraped.
func (r *Recheck) Collectors(prefix string) []prometheus.Collector {
	verdicts := func(result string, f func(RecheckStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_rechecks_total",
			Help:        "Cache misses under --caller-review-interval, by result: reviewed (a TokenReview was sent: first sight of the token, or its last review was an interval old), offline (verified against the API server's JWKS, this very token reviewed less than an interval ago), refused_offline (refused without a review), mismatch (the offline identity differs from the one TokenReview returned for the token: refused).",
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(f(r.Stats())) })
	}
	return []prometheus.Collector{
		verdicts("reviewed", func(s RecheckStats) uint64 { return s.Reviews }),
		verdicts("offline", func(s RecheckStats) uint64 { return s.Offline }),
		verdicts("refused_offline", func(s RecheckStats) uint64 { return s.Refusals }),
		verdicts("mismatch", func(s RecheckStats) uint64 { return s.Mismatches }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_rechecks_remembered", Help: "Credentials with a review on record under --caller-review-interval."},
			func() float64 { return float64(r.Remembered()) }),
	}
}
