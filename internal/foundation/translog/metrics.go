package translog

import "github.com/prometheus/client_golang/prometheus"

// metrics are a log's series, named under Config.Metrics.
type metrics struct {
	appended, dropped, failed      prometheus.Counter
	queued, size, minIndex         prometheus.Gauge
	checkpointSize, checkpointTime prometheus.Gauge
	group, sync                    prometheus.Histogram
}

func newMetrics(prefix string) *metrics {
	name := func(n string) string { return prefix + "_" + n }
	return &metrics{
		appended:       prometheus.NewCounter(prometheus.CounterOpts{Name: name("appended_total"), Help: "Entries written to the log."}),
		dropped:        prometheus.NewCounter(prometheus.CounterOpts{Name: name("dropped_total"), Help: "Entries refused before a write: the queue was full, or the log was not taking entries."}),
		failed:         prometheus.NewCounter(prometheus.CounterOpts{Name: name("failed_total"), Help: "Entries whose write or sync failed: not acknowledged (the log then takes no more until opened again)."}),
		queued:         prometheus.NewGauge(prometheus.GaugeOpts{Name: name("queue_entries"), Help: "Entries waiting for a group."}),
		size:           prometheus.NewGauge(prometheus.GaugeOpts{Name: name("size"), Help: "Entries the log holds, pruned ones included (its tree's size)."}),
		minIndex:       prometheus.NewGauge(prometheus.GaugeOpts{Name: name("min_index"), Help: "The log's minimum index: entries below it were pruned."}),
		checkpointSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("checkpoint_size"), Help: "The tree size of the latest signed checkpoint."}),
		checkpointTime: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("checkpoint_timestamp_seconds"), Help: "When this process last signed a checkpoint (Unix time)."}),
		group: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("group_entries"), Help: "Entries one write took.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 7)}),
		sync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("write_seconds"), Help: "How long a group's write (and, when groups are durable, its fdatasync) took.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 9)}),
	}
}

// Collectors are the log's metrics.
func (l *Log) Collectors() []prometheus.Collector {
	m := l.m
	cs := []prometheus.Collector{m.appended, m.dropped, m.failed, m.queued, m.size, m.minIndex, m.checkpointSize, m.checkpointTime, m.group, m.sync}
	if l.witnesses != nil {
		cs = append(cs, l.witnesses.m.collectors()...)
	}
	return cs
}
