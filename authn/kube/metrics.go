package kube

import "github.com/prometheus/client_golang/prometheus"

// Collectors export the bound-object view's answers, fallbacks
// and state, read from it when scraped.
func (b *Bound) Collectors(prefix string) []prometheus.Collector {
	stat := func(f func(BoundStats) float64) func() float64 { return func() float64 { return f(b.Stats()) } }
	answers := func(result string, f func(BoundStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_bound_answers_total",
			Help:        "Tokens the bound-object view answered without a TokenReview, by result: accepted (its service account and pod exist with the token's UIDs), gone (refused: one of them was deleted or replaced).",
			ConstLabels: prometheus.Labels{"result": result}}, stat(func(s BoundStats) float64 { return float64(f(s)) }))
	}
	fallbacks := func(reason string, f func(BoundStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_bound_fallbacks_total",
			Help:        "Tokens sent to TokenReview under --caller-watch-bound-objects, by reason: unsynced (the watches had not listed yet), broken (the view could not vouch for its state: a watch or proof failed since it was last proven current, or no proof completed within --caller-watch-max-break), unanswerable (bound to no pod, or to a pod of another node than the one watched), unknown (the view does not know the object: created after its last event, or deleted before it began).",
			ConstLabels: prometheus.Labels{"reason": reason}}, stat(func(s BoundStats) float64 { return float64(f(s)) }))
	}
	objects := func(resource string, f func(BoundStats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_bound_objects",
			Help:        "Objects the bound-object view holds (metadata only), by resource.",
			ConstLabels: prometheus.Labels{"resource": resource}}, stat(func(s BoundStats) float64 { return float64(f(s)) }))
	}
	return []prometheus.Collector{
		answers("accepted", func(s BoundStats) uint64 { return s.Answered }),
		answers("gone", func(s BoundStats) uint64 { return s.Gone }),
		fallbacks("unsynced", func(s BoundStats) uint64 { return s.Unsynced }),
		fallbacks("broken", func(s BoundStats) uint64 { return s.Broken }),
		fallbacks("unanswerable", func(s BoundStats) uint64 { return s.Unanswerable }),
		fallbacks("unknown", func(s BoundStats) uint64 { return s.Unknown }),
		objects("pods", func(s BoundStats) int { return s.Pods }),
		objects("serviceaccounts", func(s BoundStats) int { return s.ServiceAccounts }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_bound_synced", Help: "1 once both bound-object watches have listed, else 0 (every token is reviewed)."},
			stat(func(s BoundStats) float64 {
				if s.Synced {
					return 1
				}
				return 0
			})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_bound_answering", Help: "1 while the bound-object view answers (listed, proven current through the API server within --caller-watch-max-break, no watch or proof failed since), else 0 (every token it would answer for is reviewed)."},
			stat(func(s BoundStats) float64 {
				if s.Answering {
					return 1
				}
				return 0
			})),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_caller_bound_watch_failures_total", Help: "Bound-object watches that failed to open, ended before their deadline or outlived it (a closed, reset or refused connection, an API server restarting, replies swallowed, an error); each stops the view until a proof asked after it completes."},
			stat(func(s BoundStats) float64 { return float64(s.WatchFailures) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_caller_bound_watch_lag_seconds", Help: "How far behind the bound-object view may be: the seconds since the older of its two resources was last proven current (a consistent list's resource version, asked every (--caller-watch-max-break - 2s)/2, reached by the store); it saws between about 0 and twice that while the watches work; past the bound, every token is reviewed."},
			stat(func(s BoundStats) float64 { return s.Lag.Seconds() })),
	}
}
