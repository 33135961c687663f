// Command tsdb is the Shale server: a Prometheus-compatible time-series
// database whose durable state lives only in object storage.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
)

// defaultListenAddress is not Prometheus' 9090: users run Shale beside it.
const defaultListenAddress = ":9292"

// exitFenced is the exit code of a writer fenced by a newer one.
const exitFenced = 3

type config struct {
	listenAddress   string
	webConfigFile   string
	shutdownTimeout time.Duration
	readTimeout     time.Duration
	maxConnections  int
	enableAdmin     bool
	enableOTLP      bool
	configFile      string
	externalURL     string
	routePrefix     string

	mode              string
	storagePath       string
	objstoreConfig    string
	wal               boolValue
	walFlushInterval  time.Duration
	walMaxInFlight    int
	sizeRatio         float64
	walMinInterval    time.Duration
	writeTimeout      time.Duration
	retention         model.Duration
	oooWindow         time.Duration
	partition         time.Duration
	headFlushInterval time.Duration
	headFlushSamples  int64
	maxHeadSeries     int
	readerPoll        time.Duration
	readerSnapshot    string
	takeOver          bool

	cacheMemory    kingpinBytes
	cacheMemorySet bool
	cacheDiskPath  string
	cacheDiskSize  kingpinBytes
	cacheWarmAge   time.Duration

	memoryLimit kingpinBytes

	maxConcurrentImports int

	featureList []string
	features    features
	corsOrigin  string
	// remoteWriteReceiver is Prometheus' --web.enable-remote-write-receiver,
	// taken and ignored.
	remoteWriteReceiver bool

	// The query settings override the config file's query section only
	// when given on the command line: each one given adds its override.
	queryOverrides     []func(*promql.Options)
	queryTimeout       time.Duration
	queryMaxSamples    int
	queryMaxConcurrent int
	queryLookback      time.Duration

	queryMaxLength        kingpinBytes
	queryMaxDepth         int
	queryMaxSubquerySteps int64
	queryMaxMemory        kingpinBytes

	queryCacheSize      kingpinBytes
	queryCacheFreshness time.Duration
	queryRangeShards    int

	rules ruleFlags

	log promslog.Config
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{log: promslog.Config{}}
	app := kingpin.New("tsdb", "Shale: a Prometheus-compatible time-series database whose durable state lives only in object storage.\n\n"+
		"Remote-write to /api/v1/write (remote write 1.0 and 2.0); query with the Prometheus HTTP API under /api/v1.\n\n"+
		"tsdb import prometheus|openmetrics|vm ... imports history (tsdb import --help); "+
		"tsdb snapshot list|delete|copy ... manages snapshots (tsdb snapshot --help).")
	app.HelpFlag.Short('h')
	app.Version(readBuildInfo().String())
	sd := storage.DefaultOptions()

	app.Flag("web.listen-address", "Address for the HTTP API, remote write, /metrics and health endpoints. Not 9090, so Shale can run beside Prometheus.").
		Default(defaultListenAddress).StringVar(&cfg.listenAddress)
	app.Flag("web.config.file", "Prometheus web configuration file (exporter-toolkit format) enabling TLS and basic auth.").
		Default("").StringVar(&cfg.webConfigFile)
	app.Flag("web.shutdown-timeout", "Bound of a shutdown (SIGTERM): in-flight requests get up to half of it, then the flush of the head the rest, whatever the object store does.").
		Default("30s").DurationVar(&cfg.shutdownTimeout)
	app.Flag("web.read-timeout", "Longest a request's body may take to arrive (an import's: between two reads), and how long an idle connection stays open. 0: no bound.").
		Default("5m").DurationVar(&cfg.readTimeout)
	app.Flag("web.max-connections", "Most connections held open at once; more wait until one closes. 0 picks half the process' open-file limit, keeping the rest for the object store's files; -1: no limit.").
		Default("0").IntVar(&cfg.maxConnections)
	app.Flag("web.enable-admin-api", "Enable the admin endpoints under /api/v1/admin/tsdb (delete_series). Writer mode only.").
		Default("false").BoolVar(&cfg.enableAdmin)
	app.Flag("web.enable-otlp-receiver", "Serve the OTLP/HTTP metrics receiver at /api/v1/otlp/v1/metrics (writer mode; settings in the otlp section of --config.file). On by default; --no-web.enable-otlp-receiver turns it off.").
		Default("true").BoolVar(&cfg.enableOTLP)
	app.Flag("config.file", "YAML file with remote_write limits, query settings and otlp translation settings (see README). A --query.* flag given on the command line overrides its key in the query section.").
		Default("").StringVar(&cfg.configFile)

	app.Flag("mode", "writer: ingest and serve queries (fences any other writer of the bucket and prefix); reader: a read-only replica serving queries from the same bucket.").
		Default("writer").EnumVar(&cfg.mode, "writer", "reader")
	app.Flag("storage.path", "Folder of the embedded local object store, used when no --objstore.config-file is given.").
		Default("data").StringVar(&cfg.storagePath)
	app.Flag("objstore.config-file", "YAML file describing an S3 (or S3-compatible) bucket to use instead of the local folder (see README).").
		Default("").StringVar(&cfg.objstoreConfig)
	app.Flag("storage.wal", "Acknowledge a remote write only once its samples are durable in the object store. Off: acknowledge once in memory; a crash loses at most --storage.head-flush-interval.").
		Default("true").SetValue(&cfg.wal)
	app.Flag("storage.wal.flush-interval", "How often the write-ahead log groups pending writes into one object (group commit); a write waits for it. 0 picks 100ms for S3, where each object is a billed request, and 10ms for the local folder.").
		Default("0s").DurationVar(&cfg.walFlushInterval)
	app.Flag("storage.wal.min-interval", "Let a write-ahead log object go before --storage.wal.flush-interval once every write in progress has joined it (all wait), but no sooner than this after the previous object. 0 picks half the flush interval for the local folder (5ms) and, on S3, the flush interval (objects wait for the interval: every object is a billed request).").
		Default("0s").DurationVar(&cfg.walMinInterval)
	app.Flag("storage.wal.max-in-flight", "How many write-ahead log objects are written at once (1 to 16): the next ones fill meanwhile, and a write is acknowledged once its object and every earlier one are stored.").
		Default("8").IntVar(&cfg.walMaxInFlight)
	app.Flag("storage.compaction.size-ratio", "A compaction of newer data also takes in the next older sorted run of the LSM when that run is at most this many times the bytes collected so far. Higher leaves fewer runs for reads to consult and rewrites more: at 10M series, 4 rewrote the whole database every few minutes (docs/benchmarks.md).").
		Default(strconv.FormatFloat(lsm.DefaultOptions().SizeRatio, 'g', -1, 64)).Float64Var(&cfg.sizeRatio)
	app.Flag("storage.write-timeout", "How long a remote write may wait for the object store (its samples to become durable with the WAL on). Past it, and at once while the store has been failing for longer, the sender gets 503 with Retry-After and retries. Well under a sender's 30s timeout. 0: no bound.").
		Default(sd.WriteTimeout.String()).DurationVar(&cfg.writeTimeout)
	app.Flag("storage.max-head-series", "Most series a head partition holds (those with a sample in its time, --storage.partition-duration): a sample of a new series beyond it is refused with 400, as Mimir refuses series over its limit, while samples of the series held are taken. Bounds the head's memory when a sender's label values explode; the metric families whose metadata is kept are bounded by the same number. 0: no limit.").
		Default("0").IntVar(&cfg.maxHeadSeries)
	app.Flag("storage.retention.time", "How long to keep data (e.g. 15d, 12h); whole partitions older than this are dropped. 0 keeps everything.").
		Default("15d").SetValue(&cfg.retention)
	app.Flag("storage.out-of-order-window", "How far behind the newest sample the head keeps partitions open: samples within it take the fast path into memory. Older samples within the retention are accepted too (backfill), at the cost of reopening their partition. 0 rejects samples older than their series' newest.").
		Default(sd.OutOfOrderWindow.String()).DurationVar(&cfg.oooWindow)
	app.Flag("storage.partition-duration", "Length of a time partition. Cannot change once data exists.").
		Default(sd.PartitionDuration.String()).DurationVar(&cfg.partition)
	app.Flag("storage.head-flush-interval", "How often the head writes its samples to the object store as sample blocks.").
		Default(sd.HeadFlushInterval.String()).DurationVar(&cfg.headFlushInterval)
	app.Flag("storage.head-flush-samples", "Flush the head early once it holds this many samples not yet written out, or 60 per active series (those the last flush wrote, or the newest partition's if more) if that is more (bounds memory during backfills and bursts). 0: by interval only.").
		Default(strconv.FormatInt(sd.HeadFlushSamples, 10)).Int64Var(&cfg.headFlushSamples)
	app.Flag("storage.take-over", "Open the local folder for writing even while another writer's lease on it is fresh, fencing that writer. Without it a second writer on the same folder refuses to start. (On S3 a new writer always takes over, with a warning.)").
		Default("false").BoolVar(&cfg.takeOver)
	app.Flag("storage.reader.poll-interval", "In reader mode, how often to look for the writer's new data.").
		Default("5s").DurationVar(&cfg.readerPoll)
	app.Flag("storage.reader.snapshot", "In reader mode, serve this snapshot (tsdb snapshot list) instead of following the writer: the data as it was when the snapshot was taken.").
		Default("").StringVar(&cfg.readerSnapshot)

	app.Flag("cache.memory-size", "RAM block cache budget (e.g. 512MiB). Default: 512MiB, or an eighth of --memory.limit when that is less.").
		Default("512MiB").IsSetByUser(&cfg.cacheMemorySet).SetValue(&cfg.cacheMemory)
	app.Flag("cache.disk-path", "Folder of the local-disk (NVMe) block cache tier; empty disables it.").
		Default("").StringVar(&cfg.cacheDiskPath)
	app.Flag("cache.disk-size", "Disk block cache budget (e.g. 16GiB).").
		Default("16GiB").SetValue(&cfg.cacheDiskSize)

	app.Flag("cache.warm-age", "Keep the partitions of this much recent data in the block cache: loaded at start and after every flush and compaction (reader: every new manifest), into the disk tier when there is one (queries promote what they read to RAM), else into RAM. 0 disables.").
		Default("6h").DurationVar(&cfg.cacheWarmAge)

	app.Flag("memory.limit", "Soft limit of the memory the Go runtime may use (heap, stacks, runtime structures), e.g. 2GiB: the garbage collector works harder as the process nears it, and the RAM block cache gives up memory (down to a sixteenth of its budget) while the rest of the process needs it. 0: no limit (or the GOMEMLIMIT environment variable's). Whatever the setting, the GC's headroom is 25% (GOGC in the environment replaces it) of the live heap apart from the RAM block cache, at least 32MiB.").
		Default("0").SetValue(&cfg.memoryLimit)

	app.Flag("import.max-concurrent", "Most requests to /api/v1/import read and stored at once; more wait up to a minute for a turn, then get 503 with Retry-After. Each holds up to a 64MiB line and its samples. 0 picks twice the CPUs.").
		Default("0").IntVar(&cfg.maxConcurrentImports)

	app.Flag("query.timeout", "Maximum time a query may take before it is aborted.").
		Default("2m").Action(cfg.overrideQuery(func(o *promql.Options) { o.QueryTimeout = cfg.queryTimeout })).DurationVar(&cfg.queryTimeout)
	app.Flag("query.max-samples", "Maximum number of samples a single query can load into memory.").
		Default("50000000").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxSamples = cfg.queryMaxSamples })).IntVar(&cfg.queryMaxSamples)
	app.Flag("query.max-concurrency", "Maximum number of queries executed concurrently.").
		Default("20").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxConcurrentQueries = cfg.queryMaxConcurrent })).IntVar(&cfg.queryMaxConcurrent)
	app.Flag("query.lookback-delta", "How far back an instant vector selector looks for a sample.").
		Default("5m").Action(cfg.overrideQuery(func(o *promql.Options) { o.LookbackDelta = cfg.queryLookback })).DurationVar(&cfg.queryLookback)
	app.Flag("query.max-length", "Longest query text (e.g. 256KiB), refused with 400 before it is parsed. 0: no limit. See docs/query-limits.md.").
		Default("256KiB").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxQueryLength = int(cfg.queryMaxLength) })).SetValue(&cfg.queryMaxLength)
	app.Flag("query.max-depth", "Deepest nesting of a query's text (brackets, and operators of a chain such as a+b+c), refused with 400 before it is parsed. 0: no limit.").
		Default("256").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxQueryDepth = cfg.queryMaxDepth })).IntVar(&cfg.queryMaxDepth)
	app.Flag("query.max-subquery-steps", "Most evaluation steps the subqueries of one query may take together, refused with 400 before evaluation. 0: no limit.").
		Default("1000000").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxSubquerySteps = cfg.queryMaxSubquerySteps })).Int64Var(&cfg.queryMaxSubquerySteps)
	app.Flag("query.max-memory", "Memory the queries in flight may hold together (e.g. 1GiB); a query that would go beyond it fails with 503. 0: no budget.").
		Default("1GiB").Action(cfg.overrideQuery(func(o *promql.Options) { o.MaxMemory = int64(cfg.queryMaxMemory) })).SetValue(&cfg.queryMaxMemory)
	app.Flag("query.results-cache.size", "Memory of the range-query results cache (e.g. 256MiB): a dashboard refresh evaluates only the steps it has not seen. 0: no cache.").
		Default("256MiB").Action(cfg.overrideQuery(func(o *promql.Options) { o.ResultsCacheSize = int64(cfg.queryCacheSize) })).SetValue(&cfg.queryCacheSize)
	app.Flag("query.results-cache.freshness", "How far behind now the data of a step must end for the results cache to keep it (later samples are still arriving).").
		Default("1m").Action(cfg.overrideQuery(func(o *promql.Options) { o.ResultsCacheFreshness = cfg.queryCacheFreshness })).DurationVar(&cfg.queryCacheFreshness)
	app.Flag("query.range-shards", "Parts a long range query is split into, evaluated at once on as many cores (at least 50 steps each). 0: one per CPU; 1: no splitting.").
		Default("0").Action(cfg.overrideQuery(func(o *promql.Options) { o.RangeShards = cfg.queryRangeShards })).IntVar(&cfg.queryRangeShards)

	app.Flag("web.cors.origin", `Regular expression of the origins allowed by CORS, fully anchored (e.g. 'https?://(domain1|domain2)\.com').`).
		Default(".*").Action(cfg.overrideQuery(func(o *promql.Options) { o.CORSOrigin = cfg.corsOrigin })).StringVar(&cfg.corsOrigin)
	// Prometheus' names of settings Shale has under its own, so that a
	// Prometheus command line starts it (not in --help).
	app.Flag("storage.tsdb.retention.time", "Prometheus' name of --storage.retention.time.").
		Hidden().SetValue(&cfg.retention)
	app.Flag("web.enable-remote-write-receiver", "Prometheus' switch of the remote-write receiver, which a Shale writer always serves.").
		Hidden().BoolVar(&cfg.remoteWriteReceiver)
	app.Flag("enable-feature", "Prometheus feature names, comma-separated (repeatable): those of the PromQL engine and the OTLP receiver set what the config file's query and otlp sections would; the rest are accepted and logged (docs/http-api.md). Known: "+featureNames()+".").
		Default("").StringsVar(&cfg.featureList)

	addUIFlags(app, cfg)
	addRuleFlags(app, &cfg.rules)
	promslogflag.AddFlags(app, &cfg.log)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	cfg.features = parseFeatures(cfg.featureList)
	if cfg.readerSnapshot != "" {
		if cfg.mode != "reader" {
			return nil, errors.New("--storage.reader.snapshot needs --mode=reader")
		}
		if err := lsm.ValidCheckpointName(cfg.readerSnapshot); err != nil {
			return nil, fmt.Errorf("--storage.reader.snapshot: %w", err)
		}
	}
	if !(cfg.sizeRatio > 0) {
		return nil, fmt.Errorf("--storage.compaction.size-ratio must be positive, got %v", cfg.sizeRatio)
	}
	if !cfg.cacheMemorySet && cfg.memoryLimit > 0 {
		// A memory limit is a budget for the whole process: the head's
		// series and queries need most of it.
		cfg.cacheMemory = min(cfg.cacheMemory, cfg.memoryLimit/8)
	}
	return cfg, nil
}

// overrideQuery returns a flag action that adds apply to the overrides of
// the config file's query settings; kingpin runs it only for a flag given on
// the command line.
func (cfg *config) overrideQuery(apply func(*promql.Options)) kingpin.Action {
	return func(*kingpin.ParseContext) error {
		cfg.queryOverrides = append(cfg.queryOverrides, apply)
		return nil
	}
}

// applyQueryLimits sets the query settings given on the command line over
// the config file's (or the defaults).
func (cfg *config) applyQueryLimits(o *promql.Options) {
	for _, apply := range cfg.queryOverrides {
		apply(o)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == importCommand {
		os.Exit(importMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == snapshotCommand {
		os.Exit(snapshotMain(os.Args[2:], os.Stdout))
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb:", err)
		os.Exit(2)
	}
	logger := promslog.New(&cfg.log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		if errors.Is(err, storage.ErrFenced) {
			logger.Error("stopping: a newer writer opened the same bucket and prefix and fenced this one", "err", err)
			os.Exit(exitFenced)
		}
		logger.Error("stopping", "err", err)
		os.Exit(1)
	}
}
