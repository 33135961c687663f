package promql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/features"
	"github.com/prometheus/prometheus/util/httputil"
	"github.com/prometheus/prometheus/util/notifications"
	v1 "github.com/prometheus/prometheus/web/api/v1"

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
	now     func() time.Time // the clock of /federate

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
	if comps.Logger == nil {
		comps.Logger = slog.New(slog.DiscardHandler)
	}
	if comps.Gatherer == nil {
		comps.Gatherer = prometheus.NewRegistry()
	}
	if comps.ExemplarQueryable == nil {
		comps.ExemplarQueryable = noExemplars{}
	}
	if comps.Flags == nil {
		comps.Flags = map[string]string{}
	}
	if comps.ConfigYAML == nil {
		comps.ConfigYAML = func() string { return "" }
	}
	cors, err := compileCORS(opts.CORSOrigin)
	if err != nil {
		return nil, fmt.Errorf("promql options: cors_origin: %w", err)
	}

	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_promql_queries_refused_total",
		Help: "Queries refused by a limit Prometheus does not have: too_long, too_deep, subquery_steps, memory_budget.",
	}, []string{"reason"})
	for _, r := range []string{refusedTooLong, refusedTooDeep, refusedSubquerySteps, refusedMemory} {
		refused.WithLabelValues(r)
	}
	a := &API{
		opts:    opts,
		comps:   comps,
		parser:  newParser(opts, refused),
		refused: refused,
		logger:  comps.Logger,
		started: time.Now(),
		now:     time.Now,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_promql_http_requests_total",
			Help: "HTTP API requests by handler and status code.",
		}, []string{"handler", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            "shale_promql_http_request_duration_seconds",
			Help:                            "HTTP API request latency by handler.",
			Buckets:                         prometheus.DefBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"handler"}),
		federationErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_promql_federation_errors_total",
			Help: "Federation requests that failed while reading series or sending the answer.",
		}),
		federationWarnings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_promql_federation_warnings_total",
			Help: "Warnings the storage returned to federation requests.",
		}),
	}
	if err := errors.Join(
		promreg.Register(comps.Registerer, &a.requests),
		promreg.Register(comps.Registerer, &a.duration),
		promreg.Register(comps.Registerer, &a.refused),
		promreg.Register(comps.Registerer, &a.federationErrors),
		promreg.Register(comps.Registerer, &a.federationWarnings),
	); err != nil {
		return nil, fmt.Errorf("register promql API metrics: %w", err)
	}

	featureRegistry := features.NewRegistry()
	a.engine, err = newEngine(opts, a.parser, comps.Logger, comps.Registerer, featureRegistry)
	if err != nil {
		return nil, err
	}
	a.budget, err = newMemoryBudget(opts.MaxMemory, opts.MaxConcurrentQueries, a.refused, comps.Registerer)
	if err != nil {
		return nil, err
	}
	limited := &limitedEngine{ng: a.engine, maxSubquerySteps: opts.MaxSubquerySteps, budget: a.budget, refused: refused}

	bi := comps.BuildInfo
	if bi.Version == "" {
		bi.Version = compatibleVersion()
	}
	if bi.GoVersion == "" {
		bi.GoVersion = runtime.Version()
	}

	sq, ok := comps.Queryable.(storage.SampleAndChunkQueryable)
	if !ok {
		sq = sampleAndChunkQueryable{comps.Queryable}
	}
	up := v1.NewAPI(
		limited,
		sq,
		nil, // remote write and OTLP are served elsewhere
		comps.ExemplarQueryable,
		func(context.Context) v1.ScrapePoolsRetriever { return noScrape{} },
		func(context.Context) v1.TargetRetriever { return noScrape{} },
		func(context.Context) v1.AlertmanagerRetriever { return noAlertmanagers{} },
		func() config.Config { return config.DefaultConfig },
		comps.Flags,
		v1.GlobalURLOptions{ListenAddress: "", Host: "", Scheme: "http"},
		a.ready,
		adminStats{deleter: comps.Deleter},
		"", // no local data directory; snapshots are answered by snapshot()
		opts.EnableAdmin,
		false, 0, // search endpoints off
		comps.Logger,
		func(context.Context) v1.RulesRetriever { return noRules{} },
		opts.RemoteReadSampleLimit,
		opts.RemoteReadConcurrencyLimit,
		opts.RemoteReadMaxBytesInFrame,
		false, // not an agent
		cors,
		a.runtimeInfo,
		&v1.PrometheusVersion{
			Version: bi.Version, Revision: bi.Revision, Branch: bi.Branch,
			BuildUser: bi.BuildUser, BuildDate: bi.BuildDate, GoVersion: bi.GoVersion,
		},
		func() []notifications.Notification { return []notifications.Notification{} },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		comps.Gatherer,
		comps.Registerer,
		nil,        // default stats renderer
		false, nil, // remote write receiver off
		false, false, false, // OTLP receiver off
		opts.LookbackDelta,
		false, false, // type-and-unit labels, metadata append: write-side features
		errorCode[v1.OverrideErrorCode](),
		featureRegistry,
		// The served OpenAPI document lists only what this API answers.
		v1.OpenAPIOptions{IncludePaths: []string{
			"/query", "/series", "/label", "/metadata", "/status", "/format_query", "/parse_query",
			"/targets", "/scrape_pools", "/rules", "/alerts", "/alertmanagers", "/admin", "/read",
			"/features", "/notifications",
		}},
		a.parser,
		false, // query cost estimation off
		opts.QueryTimeout,
	)

	router := route.New().WithInstrumentation(a.instrument)
	up.Register(router)

	own := http.NewServeMux()
	own.Handle(APIPrefix+"/", http.StripPrefix(APIPrefix, router))
	// Endpoints whose data Shale keeps differently from a Prometheus server.
	own.HandleFunc("GET "+APIPrefix+"/metadata", a.own("/metadata", cors, a.metadata))
	own.HandleFunc("GET "+APIPrefix+"/status/config", a.own("/status/config", cors, a.config))
	own.HandleFunc("GET "+APIPrefix+"/status/tsdb", a.own("/status/tsdb", cors, a.tsdbStatus))
	own.HandleFunc("POST "+APIPrefix+"/admin/tsdb/snapshot", a.own("/admin/tsdb/snapshot", cors, a.snapshot))
	own.HandleFunc("PUT "+APIPrefix+"/admin/tsdb/snapshot", a.own("/admin/tsdb/snapshot", cors, a.snapshot))
	own.HandleFunc("GET "+FederatePath, a.federateHandler())
	a.handler = own
	return a, nil
}

// errorCode answers a query refused by the memory budget with 503: the
// upstream API gives it errorType "execution", as it does every evaluation
// error it does not know (and Prometheus' own memory limit, max-samples), and
// so status 422, which says the query itself is at fault; the same query may
// succeed once fewer run, which is what 503 tells a client. Other errors keep
// the upstream status.
//
// F is v1.OverrideErrorCode, whose first parameter has an unexported type
// that only inference can name.
func errorCode[F ~func(N, error) (int, bool), N any]() F {
	return func(_ N, err error) (int, bool) {
		if errors.Is(err, ErrMemoryBudget) {
			return http.StatusServiceUnavailable, true
		}
		return 0, false
	}
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
func (a *API) Close() error { return a.engine.Close() }

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

func (a *API) runtimeInfo() (v1.RuntimeInfo, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "<error retrieving current working directory>"
	}
	host, err := os.Hostname()
	if err != nil {
		host = "<error retrieving hostname>"
	}
	return v1.RuntimeInfo{
		StartTime:           a.started,
		CWD:                 cwd,
		Hostname:            host,
		ServerTime:          time.Now(),
		ReloadConfigSuccess: true,
		LastConfigTime:      a.started,
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
		StorageRetention:    a.comps.StorageRetention,
	}, nil
}

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

// noScrape answers the target endpoints: Shale receives samples, it does not scrape.
type noScrape struct{}

func (noScrape) ScrapePools() []string                       { return []string{} }
func (noScrape) TargetsActive() map[string][]*scrape.Target  { return map[string][]*scrape.Target{} }
func (noScrape) TargetsDropped() map[string][]*scrape.Target { return map[string][]*scrape.Target{} }
func (noScrape) TargetsDroppedCounts() map[string]int        { return map[string]int{} }
func (noScrape) ScrapePoolConfig(string) (*config.ScrapeConfig, error) {
	return nil, errors.New("scrape pool not found")
}

type noAlertmanagers struct{}

func (noAlertmanagers) Alertmanagers() []*url.URL        { return nil }
func (noAlertmanagers) DroppedAlertmanagers() []*url.URL { return nil }

type noRules struct{}

func (noRules) RuleGroups() []*rules.Group           { return nil }
func (noRules) AlertingRules() []*rules.AlertingRule { return nil }

// errUnsupported is returned by admin operations the storage does not offer.
var errUnsupported = errors.New("not supported by this storage")

// adminStats adapts the admin endpoints to the storage. Stats and Snapshot
// are never reached: tsdbStatus and snapshot answer those paths first.
type adminStats struct{ deleter SeriesDeleter }

func (s adminStats) CleanTombstones() error {
	if c, ok := s.deleter.(TombstoneCleaner); ok {
		return c.CleanTombstones(context.Background())
	}
	return nil
}

func (s adminStats) Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error {
	if s.deleter == nil {
		return fmt.Errorf("delete series: %w", errUnsupported)
	}
	return s.deleter.Delete(ctx, mint, maxt, ms...)
}

func (adminStats) Snapshot(string, bool) error { return fmt.Errorf("snapshot: %w", errUnsupported) }

func (adminStats) Stats(string, int) (*tsdb.Stats, error) {
	return nil, fmt.Errorf("stats: %w", errUnsupported)
}

func (adminStats) WALReplayStatus() (tsdb.WALReplayStatus, error) {
	return tsdb.WALReplayStatus{}, nil
}

func (adminStats) BlockMetas() ([]tsdb.BlockMeta, error) { return []tsdb.BlockMeta{}, nil }
