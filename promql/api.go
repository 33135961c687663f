package promql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grafana/regexp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/features"
	"github.com/prometheus/prometheus/util/httputil"

	"github.com/shaledb/shale/internal/promreg"
)

// APIPrefix is where the API is mounted.
const APIPrefix = "/api/v1"

// API is the Prometheus HTTP API over a storage.Queryable.
type API struct {
	opts    Options
	comps   Components
	engine  *upstream.Engine
	parser  parser.Parser
	logger  *slog.Logger
	started time.Time
	handler http.Handler
	cors    *regexp.Regexp
	limited *limitedEngine
	cache   *resultsCache // nil: range queries are not cached
	shards  int           // parts a long range query is split into (shard.go)
	build   buildInfoData

	featureRegistry features.Collector
	remoteRead      http.Handler
	now             func() time.Time // the clock of /federate

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refused  *prometheus.CounterVec
	budget   *memoryBudget // nil: no memory budget

	federationErrors   prometheus.Counter
	federationWarnings prometheus.Counter
}

// NewAPI builds the query engine and the HTTP API. Call Close when done.
func NewAPI(opts Options, comps Components) (*API, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("promql options: %w", err)
	}
	if comps.Queryable == nil {
		return nil, errors.New("promql: Components.Queryable is required")
	}
	comps = comps.withDefaults()
	cors, err := CompileCORS(opts.CORSOrigin)
	if err != nil {
		return nil, fmt.Errorf("promql options: cors_origin: %w", err)
	}

	set := promreg.NewSet(comps.Registerer)
	refused := set.CounterVec("shale_promql_queries_refused_total",
		"Queries refused by a limit Prometheus does not have: too_long, too_deep, subquery_steps, memory_budget.", "reason")
	for _, r := range []string{refusedTooLong, refusedTooDeep, refusedSubquerySteps, refusedMemory} {
		refused.WithLabelValues(r)
	}
	a := &API{
		opts:     opts,
		comps:    comps,
		parser:   newParser(opts, refused),
		refused:  refused,
		logger:   comps.Logger,
		started:  time.Now(),
		cors:     cors,
		now:      time.Now,
		requests: set.CounterVec("shale_promql_http_requests_total", "HTTP API requests by handler and status code.", "handler", "code"),
		duration: set.HistogramVec(prometheus.HistogramOpts{
			Name:                            "shale_promql_http_request_duration_seconds",
			Help:                            "HTTP API request latency by handler.",
			Buckets:                         prometheus.DefBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, "handler"),
		federationErrors: set.Counter("shale_promql_federation_errors_total",
			"Federation requests that failed while reading series or sending the answer."),
		federationWarnings: set.Counter("shale_promql_federation_warnings_total",
			"Warnings the storage returned to federation requests."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("register promql API metrics: %w", err)
	}

	a.featureRegistry = features.NewRegistry()
	a.engine, err = newEngine(opts, a.parser, comps.Logger, comps.Registerer, a.featureRegistry)
	if err != nil {
		return nil, err
	}
	a.budget, err = newMemoryBudget(opts.MaxMemory, opts.MaxConcurrentQueries, a.refused, comps.Registerer)
	if err != nil {
		return nil, err
	}
	a.limited = &limitedEngine{ng: a.engine, maxSubquerySteps: opts.MaxSubquerySteps, budget: a.budget, refused: refused}
	if opts.ResultsCacheSize > 0 && comps.Changes != nil {
		a.cache, err = newResultsCache(ResultsCacheOptions{MaxBytes: opts.ResultsCacheSize, Freshness: opts.ResultsCacheFreshness}, func() time.Time { return a.now() }, comps.Registerer)
		if err != nil {
			return nil, fmt.Errorf("results cache: %w", err)
		}
		comps.Changes.OnChange(a.cache.Changed)
	}
	a.shards = opts.RangeShards
	if a.shards == 0 {
		a.shards = runtime.GOMAXPROCS(0)
	}
	a.build = buildInfoFrom(comps.BuildInfo)
	a.remoteRead, err = newReadHandler(opts, comps, a.logger)
	if err != nil {
		return nil, err
	}
	a.handler = a.routes()
	return a, nil
}

// withDefaults fills in the optional components.
func (c Components) withDefaults() Components {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.NewRegistry()
	}
	if c.ExemplarQueryable == nil {
		c.ExemplarQueryable = noExemplars{}
	}
	if c.Flags == nil {
		c.Flags = map[string]string{}
	}
	if c.ConfigYAML == nil {
		c.ConfigYAML = func() string { return "" }
	}
	return c
}

// routes mounts the endpoints as Prometheus does (web/api/v1 Register), so
// that request metrics carry the same handler names ("/label/:name/values").
func (a *API) routes() http.Handler {
	r := route.New().WithInstrumentation(a.instrument)
	r.Options("/*path", a.wrap(func(*http.Request) result { return result{} }))
	both := func(path string, f endpoint) {
		r.Get(path, a.wrap(f))
		r.Post(path, a.wrap(f))
	}
	both("/query", a.query)
	both("/query_range", a.queryRange)
	both("/query_exemplars", a.queryExemplars)
	both("/format_query", a.formatQuery)
	both("/parse_query", a.parseQuery)
	both("/labels", a.labelNames)
	r.Get("/label/:name/values", a.wrap(a.labelValues))
	both("/series", a.series)
	for path, f := range map[string]endpoint{
		"/metadata":              a.metadata,
		"/scrape_pools":          a.scrapePools,
		"/targets":               a.targets,
		"/targets/metadata":      a.targetMetadata,
		"/targets/relabel_steps": a.relabelSteps,
		"/scrape_pools/config":   a.scrapePoolConfig,
		"/alertmanagers":         a.alertmanagers,
		"/alerts":                a.alerts,
		"/rules":                 a.rules,
		"/status/config":         a.config,
		"/status/runtimeinfo":    a.runtimeInfo,
		"/status/buildinfo":      a.buildInfo,
		"/status/flags":          a.flags,
		"/status/tsdb":           a.tsdbStatus,
		"/status/tsdb/blocks":    a.tsdbBlocks,
		"/status/self_metrics":   a.selfMetrics,
		"/features":              a.features,
	} {
		r.Get(path, a.wrap(f))
	}
	r.Get("/status/walreplay", a.plain(a.walReplay))
	r.Get("/notifications", a.plain(a.notifications))
	r.Get("/notifications/live", a.notificationsLive)
	for _, path := range []string{"/search/metric_names", "/search/label_names", "/search/label_values"} {
		r.Get(path, a.ready(a.searchDisabled))
		r.Post(path, a.ready(a.searchDisabled))
	}
	for path, f := range map[string]endpoint{
		"/admin/tsdb/delete_series":    a.deleteSeries,
		"/admin/tsdb/clean_tombstones": a.cleanTombstones,
		"/admin/tsdb/snapshot":         a.snapshot,
	} {
		r.Post(path, a.wrap(f))
		r.Put(path, a.wrap(f))
	}
	r.Post("/read", a.ready(a.remoteRead.ServeHTTP))
	r.Post("/write", a.ready(notMounted("remote write receiver needs to be enabled with --web.enable-remote-write-receiver")))
	r.Post("/otlp/v1/metrics", a.ready(notMounted("otlp write receiver needs to be enabled with --web.enable-otlp-receiver")))
	r.Get("/openapi.yaml", a.ready(serveOpenAPI))

	mux := http.NewServeMux()
	mux.Handle(APIPrefix+"/", http.StripPrefix(APIPrefix, r))
	mux.HandleFunc("GET "+FederatePath, a.federateHandler())
	return mux
}

// plain serves an endpoint that Prometheus answers without readiness and
// compression.
func (a *API) plain(f endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		httputil.SetCORS(w, a.cors, r)
		res := f(r)
		if res.err != nil {
			a.respondError(w, res.err, nil)
			return
		}
		a.respond(w, res.data, nil, "")
	}
}

// notMounted answers a receiver path the server has not mounted a handler on.
func notMounted(msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, msg, http.StatusNotFound) }
}

func buildInfoFrom(bi BuildInfo) buildInfoData {
	if bi.Version == "" {
		bi.Version = compatibleVersion()
	}
	if bi.GoVersion == "" {
		bi.GoVersion = runtime.Version()
	}
	return buildInfoData(bi)
}

// Handler serves every path under /api/v1/ except /api/v1/write, which
// answers 404 unless the server mounts a remote-write handler there, and
// /federate.
func (a *API) Handler() http.Handler { return a.handler }

// Register mounts the API on mux at /api/v1/ and /federate. A more specific
// pattern such as "POST /api/v1/write" registered on the same mux takes
// precedence.
func (a *API) Register(mux *http.ServeMux) {
	mux.Handle(APIPrefix+"/", a.handler)
	mux.Handle(FederatePath, a.handler)
}

// Engine returns the query engine, e.g. for rule evaluation.
func (a *API) Engine() *upstream.Engine { return a.engine }

// Close stops the query engine.
func (a *API) Close() error {
	if a.cache != nil {
		a.comps.Changes.OnChange(nil)
	}
	return a.engine.Close()
}

// ready answers like a Prometheus server that has not finished starting.
func (a *API) ready(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.comps.Ready != nil && !a.comps.Ready() {
			w.Header().Set("X-Prometheus-Stopping", "false")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "Service Unavailable")
			return
		}
		f(w, r)
	}
}

func (a *API) instrument(handlerName string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next(sw, r.WithContext(httputil.ContextWithPath(r.Context(), APIPrefix+r.URL.Path)))
		a.requests.WithLabelValues(handlerName, strconv.Itoa(sw.code)).Inc()
		a.duration.WithLabelValues(handlerName).Observe(time.Since(start).Seconds())
	}
}

type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	versionOnce sync.Once
	version     string
)

// compatibleVersion maps the module version of the upstream library,
// v0.MMmm.p, to the Prometheus release it was cut from, M.mm.p.
func compatibleVersion() string {
	versionOnce.Do(func() {
		version = "3.0.0"
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		for _, m := range bi.Deps {
			if m.Path != "github.com/prometheus/prometheus" {
				continue
			}
			if v, ok := prometheusRelease(m.Version); ok {
				version = v
			}
		}
	})
	return version
}

func prometheusRelease(module string) (string, bool) {
	parts := strings.SplitN(strings.TrimPrefix(module, "v"), ".", 3)
	if len(parts) != 3 || parts[0] != "0" || len(parts[1]) < 3 {
		return "", false
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return "", false
	}
	patch, _, _ := strings.Cut(parts[2], "-")
	return fmt.Sprintf("%d.%d.%s", n/100, n%100, patch), true
}

// sampleAndChunkQueryable serves remote read's chunked responses by encoding
// the samples of a plain Querier into chunks on the fly, for a storage that
// has no ChunkQuerier of its own.
type sampleAndChunkQueryable struct{ storage.Queryable }

func (q sampleAndChunkQueryable) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	qr, err := q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return chunkQuerier{qr}, nil
}

type chunkQuerier struct{ storage.Querier }

func (q chunkQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return storage.NewSeriesSetToChunkSet(q.Querier.Select(ctx, sortSeries, hints, ms...))
}

type noExemplars struct{}

func (noExemplars) ExemplarQuerier(context.Context) (storage.ExemplarQuerier, error) {
	return noExemplars{}, nil
}

func (noExemplars) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return []exemplar.QueryResult{}, nil
}
