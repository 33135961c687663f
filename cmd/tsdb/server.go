package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// gate serves its handler once it is set, and 503 until then.
type gate struct{ h atomic.Pointer[http.Handler] }

func (g *gate) set(h http.Handler) { g.h.Store(&h) }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := g.h.Load()
	if h == nil {
		http.Error(w, "Service Unavailable: recovering storage", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

func storageOptions(cfg *config) storage.Options {
	o := storage.DefaultOptions()
	o.WAL = bool(cfg.wal)
	o.Retention = time.Duration(cfg.retention)
	o.OutOfOrderWindow = cfg.oooWindow
	o.PartitionDuration = cfg.partition
	o.HeadFlushInterval = cfg.headFlushInterval
	o.HeadFlushSamples = cfg.headFlushSamples
	o.WriteTimeout = cfg.writeTimeout
	o.MaxHeadSeries = cfg.maxHeadSeries
	return o
}

// settings are the server's settings from its flags and configuration
// file, each part validated.
type settings struct {
	file    fileConfig
	query   promql.Options
	storage storage.Options
}

// loadSettings reads the configuration file and checks every part of the
// settings before anything starts.
func loadSettings(cfg *config) (settings, error) {
	fileCfg, err := loadFileConfig(cfg.configFile)
	if err != nil {
		return settings{}, err
	}
	qopts := fileCfg.Query
	qopts.EnableAdmin = cfg.enableAdmin && cfg.mode == "writer"
	cfg.features.apply(&qopts, &fileCfg.OTLP)
	cfg.applyQueryLimits(&qopts)
	if err := qopts.Validate(); err != nil {
		return settings{}, fmt.Errorf("query settings: %w", err)
	}
	if _, err := ruleConfig(cfg.configFile, qopts); err != nil {
		return settings{}, err
	}
	sopts := storageOptions(cfg)
	// One bound on time ahead for every way samples come in: the import
	// endpoint and rules write through the storage's check only.
	sopts.TooFarInFuture = max(fileCfg.RemoteWrite.MaxFutureSkew, time.Millisecond)
	if err := sopts.Validate(); err != nil {
		return settings{}, fmt.Errorf("storage settings: %w", err)
	}
	if cfg.webConfigFile != "" {
		if err := web.Validate(cfg.webConfigFile); err != nil {
			return settings{}, fmt.Errorf("web config file: %w", err)
		}
	}
	return settings{file: fileCfg, query: qopts, storage: sopts}, nil
}

func run(ctx context.Context, cfg *config, logger *slog.Logger) (err error) {
	set, err := loadSettings(cfg)
	if err != nil {
		return err
	}
	qopts, sopts := set.query, set.storage

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := readBuildInfo()
	registerBuildInfo(reg, build)
	logger.Info("starting Shale", "version", build.Version, "revision", build.Revision, "build_date", build.BuildDate, "go_version", build.GoVersion)
	cfg.features.log(logger)

	h, err := newHTTPServer(cfg, reg, logger)
	if err != nil {
		return err
	}
	ctx, h.quit = context.WithCancel(ctx)
	defer h.quit()
	if err := h.start(); err != nil {
		return err
	}
	// Every return from here on shuts the HTTP server down first, and the
	// storage, once open, after it: the whole within --web.shutdown-timeout.
	var (
		db *storage.DB
		// blockCache is closed after the storage: its shutdown (the head
		// flush, compactions still running, queries in flight) reads
		// through it.
		blockCache *cache.Tiered
	)
	defer func() {
		deadline := time.Now().Add(cfg.shutdownTimeout)
		h.shutdown(deadline)
		if blockCache != nil {
			defer blockCache.Close()
		}
		if db == nil {
			return
		}
		start := time.Now()
		sctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if cerr := db.Shutdown(sctx); cerr != nil && err == nil && !errors.Is(cerr, storage.ErrFenced) {
			err = fmt.Errorf("close storage: %w", cerr)
		}
		logger.Info("storage closed", "duration", time.Since(start))
	}()

	ob, err := openBucket(ctx, cfg.objstoreConfig, cfg.storagePath)
	if err != nil {
		return err
	}
	prefix, where := ob.prefix, ob.where
	cfg.walFlushInterval = walFlushInterval(cfg.walFlushInterval, where)
	cfg.walMinInterval = walMinInterval(cfg.walMinInterval, cfg.walFlushInterval, where)
	// No retrying layer here: the LSM owns retries, and knows which failed
	// conditional writes to check by reading back.
	bucket, err := objstore.NewMetricsBucket(ob.bucket, reg, ob.name)
	if err != nil {
		ob.bucket.Close()
		return err
	}
	defer bucket.Close()

	copts := cacheOptions(cfg)
	if err := copts.Validate(); err != nil {
		return fmt.Errorf("cache settings: %w", err)
	}
	blockCache, err = cache.New(copts, cache.Components{Registerer: reg, Logger: logger})
	if err != nil {
		return fmt.Errorf("open block cache: %w", err)
	}
	if cfg.memoryLimit > 0 {
		debug.SetMemoryLimit(int64(cfg.memoryLimit))
	}
	pacerCtx, stopPacer := context.WithCancel(ctx)
	defer stopPacer()
	go paceMemory(pacerCtx, gcBase(), blockCache, copts.MemoryBytes, logger)

	comps := storage.Components{Logger: logger, Registerer: reg}
	start := time.Now()
	var opened *storage.DB
	if cfg.mode == "reader" {
		opened, err = openReader(ctx, bucket, prefix, sopts, readerOptions(cfg), blockCache, comps)
	} else {
		opened, err = openWriter(ctx, bucket, prefix, sopts, writerOptions(cfg, where, h.advertisedAddress()), blockCache, comps)
	}
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("shutting down before storage recovery finished", "err", err)
			return nil
		}
		if errors.Is(err, lsm.ErrLiveWriter) {
			return fmt.Errorf("open storage (%s): %w (--storage.take-over fences it)", where, err)
		}
		return fmt.Errorf("open storage (%s): %w", where, err)
	}
	db = opened
	logger.Info("storage open", "object_store", where, "wal", sopts.WAL, "write_timeout", sopts.WriteTimeout, "duration", time.Since(start))
	if fsb, ok := ob.bucket.(*objstore.FilesystemBucket); ok && cfg.mode == "writer" {
		removeTempFiles(ctx, fsb, logger)
	}
	if cfg.cacheWarmAge > 0 {
		wopts := storage.DefaultWarmOptions()
		wopts.Age = cfg.cacheWarmAge
		warmer, err := db.StartWarmer(wopts, reg)
		if err != nil {
			return fmt.Errorf("cache warmer: %w", err)
		}
		defer warmer.Stop()
	}

	papi, err := h.newQueryAPI(cfg, set, db, build, reg, logger)
	if err != nil {
		return err
	}
	defer papi.Close()
	h.api.set(papi.Handler())
	h.storage.set(startStorageStatus(pacerCtx, db, cfg.mode, where, ob.name, blockCache, copts, reg, logger))

	runErr := make(chan error, 1)
	if cfg.mode == "writer" {
		if err := h.mountWriter(cfg, set, db, reg, logger); err != nil {
			return err
		}
		h.health.Store(&storeHealth{db: db, grace: readyGrace})
		go func() { runErr <- db.Run(ctx) }()
	} else {
		h.write.set(readerWriteHandler(db, logger))
		h.otlp.set(readerWriteHandler(db, logger))
		h.imp.set(readerWriteHandler(db, logger))
	}
	stopRules, err := h.serveRules(ctx, qopts, db, papi, reg)
	if err != nil {
		return err
	}
	defer stopRules()
	h.ready.Store(true)
	logger.Info("ready")

	select {
	case <-ctx.Done():
		logger.Info("shutting down: finishing in-flight requests, then flushing")
		return nil
	case err := <-h.serveErr:
		return fmt.Errorf("serve HTTP: %w", err)
	case err := <-runErr:
		return err
	case <-db.Fenced():
		return storage.ErrFenced
	}
}

// cacheOptions returns the block cache's settings from the flags.
func cacheOptions(cfg *config) cache.Options {
	copts := cache.DefaultOptions()
	copts.MemoryBytes = int64(cfg.cacheMemory)
	copts.DiskPath = cfg.cacheDiskPath
	copts.DiskBytes = int64(cfg.cacheDiskSize)
	return copts
}

// readerOptions returns the LSM's settings for a read replica.
func readerOptions(cfg *config) lsm.ReaderOptions {
	ropts := lsm.DefaultReaderOptions()
	ropts.PollInterval = cfg.readerPoll
	ropts.Checkpoint = cfg.readerSnapshot
	return ropts
}

// writerOptions returns the LSM's settings for the writer on the object
// store where, whose lease names address.
func writerOptions(cfg *config, where, address string) lsm.Options {
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = cfg.walFlushInterval
	lopts.WALMinInterval = cfg.walMinInterval
	if cfg.walMaxInFlight != 0 {
		lopts.WALMaxInFlight = cfg.walMaxInFlight
	}
	lopts.SizeRatio = cfg.sizeRatio
	// Two writers on one local folder are an accident (two processes
	// started with the same path); on S3 a new writer taking over is how a
	// writer moves.
	lopts.RefuseLiveWriter = strings.HasPrefix(where, "filesystem:") && !cfg.takeOver
	lopts.Address = address
	return lopts
}

// newQueryAPI returns the query API over db.
func (h *httpServer) newQueryAPI(cfg *config, set settings, db *storage.DB, build buildInfo, reg *prometheus.Registry, logger *slog.Logger) (*promql.API, error) {
	papi, err := promql.NewAPI(set.query, promql.Components{
		Queryable:         db,
		ExemplarQueryable: db,
		Cardinality:       promql.HeadCardinality{DB: db},
		Metadata:          db,
		Deleter:           deleterFor(db, cfg.mode),
		Snapshotter:       snapshotterFor(db, cfg.mode),
		Changes:           db,
		Ready:             h.ready.Load,
		Logger:            logger,
		Registerer:        reg,
		Gatherer:          reg,
		BuildInfo:         promql.BuildInfo{Revision: build.Revision, BuildDate: build.BuildDate, Branch: "shale-" + build.Version, GoVersion: runtime.Version()},
		Flags:             cfg.rules.flagMap(flagMap(cfg)),
		ConfigYAML:        func() string { return configYAML(cfg, set.file) },
		StorageRetention:  retentionString(time.Duration(cfg.retention)),
	})
	if err != nil {
		return nil, fmt.Errorf("query API: %w", err)
	}
	return papi, nil
}

// mountWriter mounts the write endpoints of a writer over db: remote
// write, OTLP and the import endpoint.
func (h *httpServer) mountWriter(cfg *config, set settings, db *storage.DB, reg prometheus.Registerer, logger *slog.Logger) error {
	rw, err := remotewrite.NewHandler(ingestAppendable{db}, set.file.RemoteWrite, remotewrite.Components{Logger: logger, Registerer: reg})
	if err != nil {
		return fmt.Errorf("remote write: %w", err)
	}
	h.write.set(rw)
	if err := mountOTLP(h, rw, cfg.enableOTLP, set.file.OTLP, set.query.LookbackDelta); err != nil {
		return err
	}
	imp, err := importer.NewHandler(importAppendable{db}, importer.HandlerOptions{Check: rw.CheckLabels, MaxConcurrent: cfg.maxConcurrentImports}, logger, reg)
	if err != nil {
		return fmt.Errorf("import endpoint: %w", err)
	}
	h.imp.set(imp)
	return nil
}

// writerAddress returns a func giving the address the writer's lease names
// ("" when none), read from the bucket at most once per every.
func writerAddress(db *storage.DB, logger *slog.Logger, every time.Duration) func(context.Context) string {
	var (
		mu     sync.Mutex
		addr   string
		looked time.Time
	)
	return func(ctx context.Context) string {
		mu.Lock()
		defer mu.Unlock()
		if !looked.IsZero() && time.Since(looked) < every {
			return addr
		}
		a, err := db.WriterAddress(ctx)
		if err != nil {
			logger.Debug("could not read the writer's lease", "err", err)
		}
		addr, looked = a, time.Now()
		return addr
	}
}

// readerWriteHandler answers remote writes to a read-only replica: 405 with
// Allow: POST, naming the writer's address when its lease gives one.
func readerWriteHandler(db *storage.DB, logger *slog.Logger) http.Handler {
	writer := writerAddress(db, logger, 30*time.Second)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := "this Shale server is a read-only replica (--mode=reader): send remote writes to the writer"
		if a := writer(r.Context()); a != "" {
			msg += ", at " + a
		}
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, msg, http.StatusMethodNotAllowed)
	})
}

// readyGrace is how long the object store may fail before /-/ready says so:
// a request retried once and then served is no reason to be taken out of a
// load balancer.
const readyGrace = time.Second

// storeHealth is what /-/ready asks of a writer's storage.
type storeHealth struct {
	db    *storage.DB
	grace time.Duration
}

// unready returns why the writer cannot persist writes now, or "".
func (s *storeHealth) unready(now time.Time) string {
	h := s.db.StoreHealth()
	switch {
	case h.Fenced:
		return "a newer writer opened the same bucket and prefix and fenced this one"
	case h.WritesFailingFor(now) >= s.grace:
		return fmt.Sprintf("writes to the object store have been failing for %s, since %s (last error: %s: %v); writes cannot be made durable; queries are served from memory and cache",
			h.WritesFailingFor(now).Round(time.Second), h.WritesSince.UTC().Format(time.RFC3339), h.Op, h.Err)
	}
	return ""
}

// httpServer is the server's HTTP side: the API (with /federate) and remote
// write behind gates that answer 503 until storage is open, health
// endpoints, metrics and profiles.
type httpServer struct {
	cfg    *config
	logger *slog.Logger
	srv    *http.Server
	ln     net.Listener
	// cancel ends the context of every request: in-flight queries stop
	// when the shutdown's wait for them runs out.
	cancel   context.CancelFunc
	serveErr chan error

	api, write gate
	storage    gate // GET /api/v1/status/storage
	otlp       gate
	rules      gate                        // /api/v1/rules, /alerts, /alertmanagers
	reloader   atomic.Pointer[ruleRuntime] // /-/reload
	imp        gate                        // POST /api/v1/import
	ready      atomic.Bool
	health     atomic.Pointer[storeHealth]
	// quit stops the server as SIGTERM does (/-/quit); quitting is set by
	// the first request that does.
	quit     context.CancelFunc
	quitting atomic.Bool

	// connLimit is --web.max-connections as resolved against the
	// open-file limit fdSoft (0: no limit).
	connLimit      int
	fdSoft, fdHard uint64
}

// headerTimeout is how long a request's headers may take: 30 s, or the
// read timeout when that is shorter.
func headerTimeout(read time.Duration) time.Duration {
	if read > 0 && read < 30*time.Second {
		return read
	}
	return 30 * time.Second
}

func newHTTPServer(cfg *config, reg *prometheus.Registry, logger *slog.Logger) (*httpServer, error) {
	ext, err := externalURL(cfg.externalURL, cfg.listenAddress)
	if err != nil {
		return nil, err
	}
	h := &httpServer{cfg: cfg, logger: logger, serveErr: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.Handle("/", uiHandler(ext))
	mux.Handle("GET "+storageStatusPath, &h.storage)
	mux.Handle("/api/", &h.api)
	mux.Handle(promql.FederatePath, &h.api)
	mux.Handle("/api/v1/write", &h.write)
	mux.Handle(remotewrite.OTLPPath, &h.otlp)
	h.mountRules(mux)
	mux.Handle(importer.ImportPath, &h.imp)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/-/healthy", getOrHead(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Shale is Healthy.")
	}))
	mux.HandleFunc("/-/ready", getOrHead(h.serveReady))
	// VictoriaMetrics' liveness path, which its tools ask before they
	// write (vmctl pings it before importing).
	mux.HandleFunc("/health", getOrHead(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "OK")
	}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	base, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	streaming := func(r *http.Request) bool { return r.URL.Path == importer.ImportPath }
	h.connLimit, h.fdSoft, h.fdHard = maxConnections(cfg.maxConnections)
	h.srv = &http.Server{
		Handler:           withRoutePrefix(routePrefix(cfg.routePrefix, ext), withStreamingDeadline(mux, cfg.readTimeout, streaming)),
		ReadHeaderTimeout: headerTimeout(cfg.readTimeout),
		ReadTimeout:       cfg.readTimeout,
		IdleTimeout:       cfg.readTimeout,
		ConnState:         connTracker(reg, h.connLimit),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	return h, nil
}

// getOrHead answers other methods than GET and HEAD 405, as Prometheus'
// router does for /-/healthy and /-/ready.
func getOrHead(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		f(w, r)
	}
}

func (h *httpServer) serveReady(w http.ResponseWriter, _ *http.Request) {
	if !h.ready.Load() {
		http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	if sh := h.health.Load(); sh != nil {
		if why := sh.unready(time.Now()); why != "" {
			http.Error(w, "Service Unavailable: "+why, http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "Shale is Ready.")
}

// advertisedAddress is where this server can be reached from elsewhere:
// the host name and the port it listens on.
func (h *httpServer) advertisedAddress() string {
	if h.ln == nil {
		return ""
	}
	_, port, err := net.SplitHostPort(h.ln.Addr().String())
	if err != nil {
		return ""
	}
	host, err := os.Hostname()
	if err != nil {
		return ""
	}
	scheme := "http"
	if h.cfg.webConfigFile != "" {
		if b, err := os.ReadFile(h.cfg.webConfigFile); err == nil && strings.Contains(string(b), "cert_file") {
			scheme = "https"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

func (h *httpServer) start() error {
	ln, err := net.Listen("tcp", h.cfg.listenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", h.cfg.listenAddress, err)
	}
	h.ln = ln
	go func() {
		webCfg := h.cfg.webConfigFile
		h.serveErr <- web.Serve(limitListener(ln, h.connLimit), h.srv, &web.FlagConfig{WebConfigFile: &webCfg}, h.logger)
	}()
	h.logger.Info("listening", "address", ln.Addr().String(), "mode", h.cfg.mode,
		"max_connections", h.connLimit, "open_file_limit", fmt.Sprintf("soft=%d hard=%d", h.fdSoft, h.fdHard))
	return nil
}

// shutdown stops taking requests and waits for those in flight until
// halfway to deadline; then it cancels them (queries stop) and closes their
// connections, leaving the rest of the time to the storage's flush.
func (h *httpServer) shutdown(deadline time.Time) {
	h.ready.Store(false)
	half := time.Now().Add(time.Until(deadline) / 2)
	sctx, cancel := context.WithDeadline(context.Background(), half)
	defer cancel()
	if err := h.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		h.logger.Warn("HTTP shutdown: requests still in flight were cancelled", "err", err)
		h.cancel()
		_ = h.srv.Close()
	}
	h.cancel()
}

func deleterFor(db *storage.DB, mode string) promql.SeriesDeleter {
	if mode != "writer" {
		return nil
	}
	return db
}

func retentionString(d time.Duration) string {
	if d <= 0 {
		return "unlimited"
	}
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func configYAML(cfg *config, fc fileConfig) string {
	return fmt.Sprintf("# Shale configuration\nmode: %s\nstorage:\n  wal: %s\n  retention: %s\n  out_of_order_window: %s\n  partition_duration: %s\n  head_flush_interval: %s\nremote_write:\n  max_compressed_bytes: %d\n  max_series_per_request: %d\n",
		cfg.mode, cfg.wal.String(), cfg.retention, cfg.oooWindow, cfg.partition, cfg.headFlushInterval,
		fc.RemoteWrite.MaxCompressedBytes, fc.RemoteWrite.MaxSeriesPerRequest)
}

func flagMap(cfg *config) map[string]string {
	return map[string]string{
		"web.listen-address":            cfg.listenAddress,
		"web.read-timeout":              cfg.readTimeout.String(),
		"web.max-connections":           fmt.Sprint(cfg.maxConnections),
		"web.enable-admin-api":          fmt.Sprint(cfg.enableAdmin),
		"web.external-url":              cfg.externalURL,
		"web.route-prefix":              cfg.routePrefix,
		"web.cors.origin":               cfg.corsOrigin,
		"enable-feature":                strings.Join(cfg.featureList, ","),
		"mode":                          cfg.mode,
		"storage.path":                  cfg.storagePath,
		"objstore.config-file":          cfg.objstoreConfig,
		"storage.wal":                   cfg.wal.String(),
		"storage.wal.flush-interval":    cfg.walFlushInterval.String(),
		"storage.wal.max-in-flight":     fmt.Sprint(cfg.walMaxInFlight),
		"storage.compaction.size-ratio": fmt.Sprint(cfg.sizeRatio),
		"storage.wal.min-interval":      cfg.walMinInterval.String(),
		"storage.take-over":             fmt.Sprint(cfg.takeOver),
		"storage.reader.poll-interval":  cfg.readerPoll.String(),
		"storage.reader.snapshot":       cfg.readerSnapshot,
		"storage.write-timeout":         cfg.writeTimeout.String(),
		"storage.retention.time":        cfg.retention.String(),
		"storage.out-of-order-window":   cfg.oooWindow.String(),
		"storage.partition-duration":    cfg.partition.String(),
		"storage.head-flush-interval":   cfg.headFlushInterval.String(),
		"storage.head-flush-samples":    fmt.Sprint(cfg.headFlushSamples),
		"storage.max-head-series":       fmt.Sprint(cfg.maxHeadSeries),
		"import.max-concurrent":         fmt.Sprint(cfg.maxConcurrentImports),
		"cache.memory-size":             cfg.cacheMemory.String(),
		"cache.disk-path":               cfg.cacheDiskPath,
		"cache.disk-size":               cfg.cacheDiskSize.String(),
		"cache.warm-age":                cfg.cacheWarmAge.String(),
		"memory.limit":                  cfg.memoryLimit.String(),
		"query.timeout":                 cfg.queryTimeout.String(),
		"query.max-samples":             fmt.Sprint(cfg.queryMaxSamples),
		"query.max-concurrency":         fmt.Sprint(cfg.queryMaxConcurrent),
		"query.lookback-delta":          cfg.queryLookback.String(),
		"query.max-length":              cfg.queryMaxLength.String(),
		"query.max-depth":               fmt.Sprint(cfg.queryMaxDepth),
		"query.max-subquery-steps":      fmt.Sprint(cfg.queryMaxSubquerySteps),
		"query.max-memory":              cfg.queryMaxMemory.String(),
		"query.results-cache.size":      cfg.queryCacheSize.String(),
		"query.results-cache.freshness": cfg.queryCacheFreshness.String(),
		"query.range-shards":            fmt.Sprint(cfg.queryRangeShards),
		"log.level":                     cfg.log.Level.String(),
	}
}

// minGCPercent bounds how low paceGC takes GOGC, so that a heap made almost
// only of cached blocks does not collect after every few allocations.
const minGCPercent = 10

// minGCHeadroom is the least headroom paceGC gives the heap: with a small
// live heap a percentage alone would collect after every few MiB allocated,
// and a query allocates tens of MiB.
const minGCHeadroom = 32 << 20

// defaultGCPercent is the garbage collector's headroom, in percent of the
// live heap, when the GOGC environment variable does not set it. Go's
// default of 100 lets the heap reach twice the live heap, and the live heap
// of a server with many active series is mostly long-lived head structures
// that a collection marks cheaply (one pointer-light object per series): at
// 1M series, 50 took the peak RSS from 1646 to 1179 MiB for the same server
// CPU per sample, and 25 took RSS per series from 636 to 543-549 bytes for
// about 5 % more CPU (tsdb-bench, 60 s of ingest; the collector had 2 % of
// the CPU at 50).
const defaultGCPercent = 25

// gcBase returns the GOGC percentage the server paces around: the GOGC
// environment variable's when it is set (-1 when it is off), else
// defaultGCPercent, which it installs.
func gcBase() int {
	if _, set := os.LookupEnv("GOGC"); set {
		base := debug.SetGCPercent(100)
		debug.SetGCPercent(base)
		return base
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// paceMemory runs every second to keep the memory the block cache's RAM
// tier takes in proportion to the rest.
//
// It keeps the cached blocks from being counted twice by the garbage
// collector. A collection starts once the heap has grown by base percent of
// the live heap; the cached blocks are live, long-lived and hold no pointers
// (cheap to mark), yet they would raise that goal by their own size: a full
// 512 MiB cache cost another 512 MiB of RSS in headroom at GOGC=100. So
// paceMemory sets GOGC so that the headroom is base percent of the live heap
// apart from the cache, but at least minGCHeadroom (not when base is not
// positive: GOGC=off).
//
// And under a memory limit (--memory.limit or GOMEMLIMIT) the cache yields:
// while the rest of the heap and its headroom leave less room than the
// cache's budget (want), the cache is capped to what is left (cacheCeiling),
// so that the limit holds where it otherwise could not; the head, the
// requests and the queries need the memory more than the cache. The cap is
// lifted as the room comes back (cacheGovernor). It returns when ctx ends.
func paceMemory(ctx context.Context, base int, c memoryCache, want int64, logger *slog.Logger) {
	if base > 0 {
		defer debug.SetGCPercent(base)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	cur := base
	gov := cacheGovernor{want: want, cap: want, low: math.MaxInt64}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			logger.Warn("memory pacing off: the runtime does not report the live heap")
			return
		}
		live, cached := int64(sample[0].Value.Uint64()), c.Stats().Memory.Bytes
		if base > 0 {
			p := gcPercent(base, live, cached)
			// Small changes are not worth a new heap goal.
			if p != cur && (p < cur*15/16 || p > cur*17/16 || p == base) {
				debug.SetGCPercent(p)
				cur = p
			}
		}
		if want <= 0 {
			continue
		}
		limit, ceil := debug.SetMemoryLimit(-1), want
		if limit != math.MaxInt64 {
			ceil = cacheCeiling(limit, live, cached, base, want)
		}
		was := gov.cap
		n, change := gov.next(ceil)
		if !change {
			continue
		}
		switch budget := c.LimitMemory(n); {
		case n == want:
			logger.Info("memory: the block cache has its whole budget again", "budget_bytes", budget)
		case was == want:
			logger.Info("memory: the block cache yields to stay within the memory limit",
				"limit_bytes", limit, "live_heap_bytes", live, "cache_budget_bytes", budget)
		default:
			logger.Debug("memory: the block cache's budget changes", "live_heap_bytes", live, "cache_budget_bytes", budget)
		}
	}
}

// cacheLiftAfter is how many seconds of room paceMemory waits for before it
// raises the block cache's cap.
const cacheLiftAfter = 30

// cacheGovernor turns one cache ceiling a second into the cap the block
// cache gets. The live heap swings between collections by a tenth or more
// at millions of series, and so does the ceiling; following it would evict
// and refill the cache every few seconds. So the cap falls at once to a
// ceiling below it, but rises only after cacheLiftAfter seconds without a
// change, to the lowest ceiling of those seconds. Changes smaller than
// 1/32 of the budget are not made, except to give the whole budget back.
type cacheGovernor struct {
	want, cap int64 // the budget; the cap in force
	low       int64 // the lowest ceiling of the window: the seconds since the last change or window
	calm      int   // seconds since then
}

// next takes this second's ceiling and returns the cap, and whether it
// changed.
func (g *cacheGovernor) next(ceil int64) (int64, bool) {
	step := g.want / 32
	g.calm++
	g.low = min(g.low, ceil)
	switch {
	case ceil < g.cap-step:
		g.cap = ceil
	case g.calm < cacheLiftAfter:
		return g.cap, false
	case g.low > g.cap+step || (g.low == g.want && g.cap != g.want):
		g.cap = g.low
	default:
		g.calm, g.low = 0, math.MaxInt64 // a new window from the next second
		return g.cap, false
	}
	g.calm, g.low = 0, math.MaxInt64
	return g.cap, true
}

// memoryCache is what paceMemory needs of the block cache.
type memoryCache interface {
	Stats() cache.Stats
	LimitMemory(n int64) int64
}

// cacheCeiling returns the cap of the block cache's RAM tier (its data
// blocks: meta blocks keep their share, at most cache.Options.MetaShare of
// the budget, beside it) under a memory limit of limit bytes, with a live
// heap of live bytes of which cached are the cache's: the limit, less a
// sixteenth of it for what the runtime keeps besides live objects (stacks,
// free spans, metadata), less the rest of the live heap and the collector's
// headroom over it (gcHeadroom); at most want, the cache's budget, and at
// least a sixteenth of it.
func cacheCeiling(limit, live, cached int64, base int, want int64) int64 {
	rest, headroom := gcHeadroom(base, live, cached)
	room := limit - limit/16 - rest - headroom
	return min(max(room, want/16), want)
}

// gcPercent is the GOGC value that makes the heap goal live + max((live -
// cached) * base/100, minGCHeadroom): headroom for the heap apart from the
// cache only, and not too little for a small heap. It is base when the live
// heap is unknown, and within [min(minGCPercent, base), max(base, 100)]: a
// larger value, set while the heap was small, could let the heap grow
// many times over before the next call lowers it.
func gcPercent(base int, live, cached int64) int {
	if live <= 0 {
		return base
	}
	_, headroom := gcHeadroom(base, live, cached)
	p := int(headroom * 100 / live)
	return min(max(p, min(minGCPercent, base)), max(base, 100))
}

// gcHeadroom returns the live heap apart from the cache (rest) and the
// headroom the collector gets over the heap: base percent of rest, at least
// minGCHeadroom; none when base is not positive (GOGC=off).
func gcHeadroom(base int, live, cached int64) (rest, headroom int64) {
	rest = max(live-max(cached, 0), 0)
	if base > 0 {
		headroom = max(rest*int64(base)/100, minGCHeadroom)
	}
	return rest, headroom
}
