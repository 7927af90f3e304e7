package serve

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/callerauth/callerauth/internal/foundation/version"
)

// Health is a service's metrics registry (with the Go and process
// collectors) and its readiness checks, served as /metrics, /healthz and
// /readyz.
type Health struct {
	Registry *prometheus.Registry
	// malformed counts the requests each HTTP server refused for their
	// HTTP/1.x framing, by server and problem.
	malformed *prometheus.CounterVec
	mu        sync.Mutex
	checks    []check
	also      []prometheus.Gatherer
	extra     []route
}

type route struct {
	pattern string
	h       http.Handler
}

// malformedOf is the framing-refusal counter of one server.
func (h *Health) malformedOf(server string) *prometheus.CounterVec {
	return h.malformed.MustCurryWith(prometheus.Labels{"server": server})
}

// Handle serves h on the metrics listener beside /metrics, /healthz and
// /readyz: what a co-located consumer reads (callerauth-proxy's JWKS).
// Call it before the service runs.
func (h *Health) Handle(pattern string, handler http.Handler) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extra = append(h.extra, route{pattern, handler})
}

type check struct {
	name string
	fn   func(context.Context) error
}

// newHealth returns a registry with the Go and process collectors.
func newHealth() *Health {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	malformed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_malformed_requests_total",
		Help: "HTTP/1.x requests refused (400, the connection closed) for their framing, by server and problem: both_framings, a body on a method that has none, a malformed chunk, a trailer, …"},
		[]string{"server", "problem"})
	reg.MustRegister(malformed)
	return &Health{Registry: reg, malformed: malformed}
}

// AddReadyCheck adds a check /readyz runs; the service is ready when every
// check returns nil.
func (h *Health) AddReadyCheck(name string, fn func(context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, check{name, fn})
}

// AddGatherer serves g's metrics beside the registry's on /metrics (a
// library's own registry: controller-runtime's). Call it before serving.
func (h *Health) AddGatherer(g prometheus.Gatherer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.also = append(h.also, g)
}

// Healthz answers "ok": the process serves.
func (h *Health) Healthz(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

// Readyz answers "ok" when every readiness check passes, else 503 naming
// the first that failed.
func (h *Health) Readyz(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	checks := append([]check(nil), h.checks...)
	h.mu.Unlock()
	for _, c := range checks {
		if err := c.fn(r.Context()); err != nil {
			http.Error(w, c.name+": "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = io.WriteString(w, "ok")
}

// Handler serves /metrics, /healthz and /readyz.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	h.mu.Lock()
	gatherers := append(prometheus.Gatherers{h.Registry}, h.also...)
	for _, r := range h.extra {
		mux.Handle(r.pattern, r.h)
	}
	h.mu.Unlock()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", h.Healthz)
	mux.HandleFunc("GET /readyz", h.Readyz)
	return mux
}

// BuildInfo is the <prefix>_build_info gauge: 1, labelled with the build
// (version.Get).
func BuildInfo(prefix string) prometheus.Collector {
	i := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + "_build_info",
		Help:        "The build running: always 1, labelled with the module version, the VCS revision, whether the tree was modified, and the Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "dirty": strconv.FormatBool(i.Dirty), "goversion": i.Go}})
	g.Set(1)
	return g
}
