// Command tsdb is the Shale server: a Prometheus-compatible time-series
// database whose durable state lives only in object storage.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
)

// defaultListenAddress is not Prometheus' 9090: users run Shale beside it.
const defaultListenAddress = ":9292"

type config struct {
	listenAddress   string
	storagePath     string
	shutdownTimeout time.Duration
	log             promslog.Config
}

func parseFlags(args []string) (*config, error) {
	cfg := &config{log: promslog.Config{}}
	app := kingpin.New("tsdb", "Shale: a Prometheus-compatible time-series database whose durable state lives only in object storage.")
	app.HelpFlag.Short('h')
	app.Flag("web.listen-address", "Address to listen on for the HTTP API, remote write, /metrics and health endpoints.").
		Default(defaultListenAddress).StringVar(&cfg.listenAddress)
	app.Flag("storage.path", "Folder of the embedded local object store, used when no --objstore.config-file is given.").
		Default("data").StringVar(&cfg.storagePath)
	app.Flag("web.shutdown-timeout", "How long a shutdown waits for in-flight requests to finish.").
		Default("30s").DurationVar(&cfg.shutdownTimeout)
	promslogflag.AddFlags(app, &cfg.log)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsdb:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, promslog.New(&cfg.log)); err != nil {
		fmt.Fprintln(os.Stderr, "tsdb:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg *config, logger *slog.Logger) error {
	if err := os.MkdirAll(cfg.storagePath, 0o755); err != nil {
		return fmt.Errorf("create storage folder: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Shale is Healthy.")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Shale is Ready.")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)

	ln, err := net.Listen("tcp", cfg.listenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listenAddress, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("listening", "address", ln.Addr().String(), "storage_path", cfg.storagePath)
	ready.Store(true)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
