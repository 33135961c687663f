package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"golang.org/x/term"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
)

// importConfig is the settings of tsdb import.
type importConfig struct {
	source string // prometheus, openmetrics or vm
	path   string

	url             string
	rwVersion       string
	storagePath     string
	objstoreConfig  string
	wal             boolValue
	walFlush        time.Duration
	retention       model.Duration
	oooWindow       time.Duration
	partition       time.Duration
	writers         int
	progressEvery   time.Duration
	noProgress      bool
	remoteBatchSize int

	log promslog.Config
}

// importCommand is the first argument that makes tsdb an importer.
const importCommand = "import"

func parseImportFlags(args []string) (*importConfig, error) {
	cfg := &importConfig{log: promslog.Config{}}
	app := kingpin.New("tsdb import", "Import history into Shale: a Prometheus data directory, an OpenMetrics text file or a VictoriaMetrics JSON-line export.\n\n"+
		"Alone (the default) the import opens the bucket as its writer: no Shale writer may be running on it. With --url it sends remote writes to the running writer at that address instead.\n"+
		"An interrupted import is finished by running it again: a series keeps one value per timestamp.")
	app.HelpFlag.Short('h')
	sd := storage.DefaultOptions()
	io := importer.DefaultOptions()

	app.Flag("url", "Import beside a running Shale writer through its HTTP API (e.g. http://localhost:9292): remote-write batches, retried on 429 and 5xx. Empty: open the bucket directly (no writer may be running).").
		Default("").StringVar(&cfg.url)
	app.Flag("remote-write.version", "Remote-write protocol version with --url: 2 (counts what the server refused exactly) or 1.").
		Default("2").EnumVar(&cfg.rwVersion, "1", "2")
	app.Flag("remote-write.batch-samples", "Most samples in one remote-write request with --url.").
		Default("20000").IntVar(&cfg.remoteBatchSize)
	bucketFlags(app, &cfg.storagePath, &cfg.objstoreConfig)
	app.Flag("storage.wal", "Count a batch as stored only once it is durable in the object store (as the server's flag). Off: faster, and a killed import loses what it had not written out yet (run it again).").
		Default("true").SetValue(&cfg.wal)
	app.Flag("storage.wal.flush-interval", "Group-commit interval of the write-ahead log (as the server's flag; 0: automatic).").
		Default("0s").DurationVar(&cfg.walFlush)
	app.Flag("storage.retention.time", "The server's retention: samples older than the newest sample (stored or imported) by more are refused and counted. 0 keeps everything.").
		Default("15d").SetValue(&cfg.retention)
	app.Flag("storage.out-of-order-window", "As the server's flag.").
		Default(sd.OutOfOrderWindow.String()).DurationVar(&cfg.oooWindow)
	app.Flag("storage.partition-duration", "As the server's flag (must match the data's).").
		Default(sd.PartitionDuration.String()).DurationVar(&cfg.partition)
	app.Flag("writers", "Batches written at once.").
		Default(fmt.Sprint(io.Writers)).IntVar(&cfg.writers)
	app.Flag("progress.interval", "How often to print a progress line when stderr is not a terminal (on a terminal a bar is redrawn).").
		Default(io.ProgressInterval.String()).DurationVar(&cfg.progressEvery)
	app.Flag("progress.off", "Print no progress, only the summary.").
		Default("false").BoolVar(&cfg.noProgress)
	promslogflag.AddFlags(app, &cfg.log)

	prom := app.Command("prometheus", "Import a Prometheus data directory: its blocks and its head (WAL), floats and native histograms, tombstones honoured. The directory is not changed; it may be a running Prometheus'.")
	prom.Arg("data-dir", "Prometheus' --storage.tsdb.path.").Required().StringVar(&cfg.path)
	om := app.Command("openmetrics", "Import an OpenMetrics text file as promtool tsdb create-blocks-from openmetrics reads it: every sample with a timestamp (in seconds), ending with # EOF.")
	om.Arg("file", "The OpenMetrics file.").Required().StringVar(&cfg.path)
	vm := app.Command("vm", "Import VictoriaMetrics' JSON-line export (/api/v1/export): one {\"metric\":{...},\"values\":[...],\"timestamps\":[...]} a line; gzip accepted.")
	vm.Arg("file", "The JSON-line file (- for standard input).").Required().StringVar(&cfg.path)

	cmd, err := parseCommand(app, args, "name what to import: prometheus, openmetrics or vm (tsdb import --help)")
	if err != nil {
		return nil, err
	}
	cfg.source = cmd
	return cfg, nil
}

// parseCommand parses args with app, whose commands are the first
// argument's choices, and returns the command given. Without one it fails
// with missing where kingpin would print the usage and exit 0.
func parseCommand(app *kingpin.Application, args []string, missing string) (string, error) {
	named := slices.ContainsFunc(args, func(a string) bool {
		return app.GetCommand(a) != nil || a == "help" || strings.HasPrefix(a, "--help") || a == "-h"
	})
	if !named {
		return "", errors.New(missing)
	}
	return app.Parse(args)
}

// importMain runs tsdb import with args (those after "import") and returns
// the exit code.
func importMain(args []string) int {
	cfg, err := parseImportFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb import:", err)
		return 2
	}
	logger := promslog.New(&cfg.log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sum, err := runImport(ctx, cfg, logger)
	if err != nil && sum.Duration == 0 {
		// It never started.
		fmt.Fprintln(os.Stderr, "tsdb import:", err)
		return 1
	}
	fmt.Fprint(os.Stderr, sum.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb import: stopped:", err)
		fmt.Fprintln(os.Stderr, "tsdb import: what was acknowledged is stored; run the same command again to import the rest (samples already stored keep one value)")
		return 1
	}
	return 0
}

func runImport(ctx context.Context, cfg *importConfig, logger *slog.Logger) (importer.Summary, error) {
	opts := importer.DefaultOptions()
	opts.Writers = cfg.writers
	opts.ProgressInterval = cfg.progressEvery
	if !cfg.noProgress {
		opts.Progress = os.Stderr
		// A terminal gets its progress bar redrawn in place.
		opts.Terminal = term.IsTerminal(int(os.Stderr.Fd()))
	}
	if err := opts.Validate(); err != nil {
		return importer.Summary{}, err
	}
	src, err := importSource(cfg, logger)
	if err != nil {
		return importer.Summary{}, err
	}
	if cfg.url != "" {
		sink, err := importer.NewRemoteSink(importer.RemoteOptions{URL: cfg.url, Version: cfg.rwVersion, BatchSamples: cfg.remoteBatchSize}, logger)
		if err != nil {
			return importer.Summary{}, err
		}
		return importer.Run(ctx, src, sink, opts)
	}
	return importAlone(ctx, cfg, src, opts, logger)
}

func importSource(cfg *importConfig, logger *slog.Logger) (importer.Source, error) {
	switch cfg.source {
	case "prometheus":
		return importer.NewPromSource(cfg.path, logger)
	case "openmetrics":
		return importer.NewOpenMetricsFileSource(cfg.path)
	case "vm":
		return importer.NewVMFileSource(cfg.path)
	}
	return nil, fmt.Errorf("unknown import source %q", cfg.source)
}

// importAlone opens the bucket as its writer, refusing while a live writer
// holds the lease, and imports through the storage's appender.
func importAlone(ctx context.Context, cfg *importConfig, src importer.Source, opts importer.Options, logger *slog.Logger) (sum importer.Summary, err error) {
	sopts := storage.DefaultOptions()
	sopts.WAL = bool(cfg.wal)
	sopts.Retention = time.Duration(cfg.retention)
	sopts.OutOfOrderWindow = cfg.oooWindow
	sopts.PartitionDuration = cfg.partition
	sopts.WriteTimeout = 0 // the importer retries; it has no sender waiting
	if err := sopts.Validate(); err != nil {
		return sum, fmt.Errorf("storage settings: %w", err)
	}
	ob, err := openBucket(ctx, cfg.objstoreConfig, cfg.storagePath)
	if err != nil {
		return sum, err
	}
	defer ob.bucket.Close()
	reg := prometheus.NewRegistry()
	copts := cache.DefaultOptions()
	copts.MemoryBytes = 64 << 20
	blockCache, err := cache.New(copts, cache.Components{Registerer: reg, Logger: logger})
	if err != nil {
		return sum, fmt.Errorf("open block cache: %w", err)
	}
	defer blockCache.Close()
	lopts := lsm.DefaultOptions()
	lopts.WALFlushInterval = walFlushInterval(cfg.walFlush, ob.where)
	// On S3 too: an import never takes over from a live server.
	lopts.RefuseLiveWriter = true
	db, err := openWriter(ctx, ob.bucket, ob.prefix, sopts, lopts, blockCache, storage.Components{Logger: logger, Registerer: reg})
	if err != nil {
		if errors.Is(err, lsm.ErrLiveWriter) {
			// The error quotes the live writer's lease, which names
			// its address when it serves HTTP.
			addr := strings.TrimRight(lsm.LeaseField(err.Error(), "addr"), ")")
			hint := "stop it, or import through it with --url=http://<its address>"
			if addr != "" {
				hint = "stop it, or import through it with --url=" + addr
			}
			return sum, fmt.Errorf("a Shale writer is running on %s: %w; %s", ob.where, err, hint)
		}
		return sum, fmt.Errorf("open storage (%s): %w", ob.where, err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- db.Run(runCtx) }()
	defer func() {
		stopRun()
		<-runErr
		start := time.Now()
		// The samples are committed; writing the head out must not be
		// cut short by the signal that ended the import.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if cerr := db.Shutdown(sctx); cerr != nil && err == nil {
			err = fmt.Errorf("close storage: %w", cerr)
		}
		// The head's last write-out is part of the import: the rate
		// the summary gives counts it.
		sum.Duration += time.Since(start)
		logger.Info("storage closed", "duration", time.Since(start))
	}()
	return importer.Run(ctx, src, importer.NewAppendableSink(importAppendable{db}, logger), opts)
}

// importAppendable lets the importer append to the storage, with the
// appender the remote-write receiver uses.
type importAppendable struct{ db *storage.DB }

func (a importAppendable) Appender(ctx context.Context) importer.Appender {
	return a.db.IngestAppender(ctx)
}
