package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/shaledb/shale/internal/promreg"
	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/rules"
	"github.com/shaledb/shale/storage"
)

// ruleFlags are the flags of rule evaluation, notification and reload,
// named and meant as Prometheus'.
type ruleFlags struct {
	outageTolerance model.Duration
	forGracePeriod  model.Duration
	resendDelay     model.Duration
	queueCapacity   int
	drainQueue      bool
	enableLifecycle bool
	concurrentEvals int64
}

func addRuleFlags(app *kingpin.Application, f *ruleFlags) {
	d := rules.DefaultOptions()
	app.Flag("rules.alert.for-outage-tolerance", "Max time to tolerate the server being down to restore the 'for' state of alerts.").
		Default(model.Duration(d.OutageTolerance).String()).SetValue(&f.outageTolerance)
	app.Flag("rules.alert.for-grace-period", "Minimum duration between alert and restored 'for' state. This is maintained only for alerts with configured 'for' time greater than the grace period.").
		Default(model.Duration(d.ForGracePeriod).String()).SetValue(&f.forGracePeriod)
	app.Flag("rules.alert.resend-delay", "Minimum amount of time to wait before resending an alert to Alertmanager.").
		Default(model.Duration(d.ResendDelay).String()).SetValue(&f.resendDelay)
	app.Flag("alertmanager.notification-queue-capacity", "The capacity of the queue for pending Alertmanager notifications.").
		Default(fmt.Sprint(d.NotificationQueueCapacity)).IntVar(&f.queueCapacity)
	app.Flag("alertmanager.drain-notification-queue-on-shutdown", "Send any outstanding Alertmanager notifications when shutting down. If false, any outstanding Alertmanager notifications will be dropped when shutting down.").
		Default(fmt.Sprint(d.DrainNotificationQueue)).BoolVar(&f.drainQueue)
	app.Flag("rules.max-concurrent-rule-evals", "Rules without dependencies on other rules of their group evaluated at once beside the groups' own evaluations, across all groups (Prometheus' concurrent-rule-eval feature, on in Shale: each rule's samples wait for the WAL's group commit). 0: one rule after another.").
		Default(fmt.Sprint(d.MaxConcurrentEvals)).Int64Var(&f.concurrentEvals)
	app.Flag("web.enable-lifecycle", "Enable the lifecycle API: POST /-/reload reloads the config file, POST /-/quit stops the server as SIGTERM does. SIGHUP reloads the config file in any case.").
		Default("false").BoolVar(&f.enableLifecycle)
}

func (f *ruleFlags) options() rules.Options {
	return rules.Options{
		OutageTolerance:           time.Duration(f.outageTolerance),
		ForGracePeriod:            time.Duration(f.forGracePeriod),
		ResendDelay:               time.Duration(f.resendDelay),
		NotificationQueueCapacity: f.queueCapacity,
		DrainNotificationQueue:    f.drainQueue,
		MaxConcurrentEvals:        f.concurrentEvals,
	}
}

func (f *ruleFlags) flagMap(m map[string]string) map[string]string {
	m["rules.alert.for-outage-tolerance"] = f.outageTolerance.String()
	m["rules.alert.for-grace-period"] = f.forGracePeriod.String()
	m["rules.alert.resend-delay"] = f.resendDelay.String()
	m["alertmanager.notification-queue-capacity"] = fmt.Sprint(f.queueCapacity)
	m["alertmanager.drain-notification-queue-on-shutdown"] = fmt.Sprint(f.drainQueue)
	m["web.enable-lifecycle"] = fmt.Sprint(f.enableLifecycle)
	m["rules.max-concurrent-rule-evals"] = fmt.Sprint(f.concurrentEvals)
	return m
}

// ruleConfig reads the config file at path (all of it, as at start) and
// returns its Prometheus sections (global, rule_files, alerting), checked as
// Prometheus checks them, rule files included.
func ruleConfig(path string, qopts promql.Options) (*rules.Config, error) {
	fc, err := loadFileConfig(path)
	if err != nil {
		return nil, err
	}
	dir := ""
	if path != "" {
		dir = filepath.Dir(path)
	}
	pc, err := fc.Prometheus.Parse(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := rules.CheckRuleFiles(pc, promql.NewParser(qopts), nil); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return pc, nil
}

// ruleRuntime is the server's rule side: the manager (on a writer only) and
// the reload of the config file's rule and alerting sections.
type ruleRuntime struct {
	path   string
	qopts  promql.Options
	mgr    *rules.Manager // nil on a reader: it evaluates no rule
	logger *slog.Logger

	mu          sync.Mutex // one reload at a time
	success     prometheus.Gauge
	successTime prometheus.Gauge
}

func newRuleRuntime(path string, qopts promql.Options, reg prometheus.Registerer, logger *slog.Logger) (*ruleRuntime, error) {
	set := promreg.NewSet(reg)
	r := &ruleRuntime{
		path: path, qopts: qopts, logger: logger,
		success: set.Gauge("prometheus_config_last_reload_successful",
			"Whether the last configuration reload attempt was successful."),
		successTime: set.Gauge("prometheus_config_last_reload_success_timestamp_seconds",
			"Timestamp of the last successful configuration reload."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("register reload metrics: %w", err)
	}
	return r, nil
}

// startRules builds the rule manager of a writer over db and the query
// API's engine, applies the config file's rule files and Alertmanagers and
// starts evaluating. Stop the manager when done.
func (r *ruleRuntime) startRules(opts rules.Options, db *storage.DB, papi *promql.API, externalURL string, reg prometheus.Registerer) error {
	u, err := url.Parse(externalURL)
	if err != nil {
		return fmt.Errorf("external URL %q: %w", externalURL, err)
	}
	mgr, err := rules.New(opts, rules.Components{
		Appendable:  db.QueuedAppendable(),
		Queryable:   db,
		QueryFunc:   promql.EngineQueryFunc(papi.Engine(), db),
		Parser:      promql.NewParser(r.qopts),
		ExternalURL: u,
		Logger:      r.logger,
		Registerer:  reg,
	})
	if err != nil {
		return err
	}
	r.mgr = mgr
	if err := r.reload(); err != nil {
		mgr.Stop()
		return err
	}
	mgr.Run()
	return nil
}

// reload reads the config file again and applies its rule and alerting
// sections; when any part of the file is wrong it keeps the running
// configuration and says why. Other sections take effect at the next start.
func (r *ruleRuntime) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logger.Info("Loading configuration file", "filename", r.path)
	err := func() error {
		pc, err := ruleConfig(r.path, r.qopts)
		if err != nil {
			return fmt.Errorf("couldn't load configuration (--config.file=%q): %w", r.path, err)
		}
		if r.mgr == nil {
			return nil
		}
		return r.mgr.ApplyConfig(pc)
	}()
	if err != nil {
		r.success.Set(0)
		r.logger.Error("Error reloading config; the running configuration is kept", "err", err)
		return err
	}
	r.success.Set(1)
	r.successTime.SetToCurrentTime()
	r.logger.Info("Completed loading of configuration file", "filename", r.path)
	return nil
}

// stop stops the manager, if any.
func (r *ruleRuntime) stop() {
	if r.mgr != nil {
		r.mgr.Stop()
	}
}

// reloadOnSIGHUP reloads on every SIGHUP until ctx ends.
func (r *ruleRuntime) reloadOnSIGHUP(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = r.reload() // logged and counted
			}
		}
	}()
}

// mountRules mounts the rule and alert endpoints, /-/reload and /-/quit on
// mux.
func (h *httpServer) mountRules(mux *http.ServeMux) {
	for _, p := range rules.Paths {
		mux.Handle(p, &h.rules)
	}
	mux.HandleFunc("/-/reload", h.serveReload)
	mux.HandleFunc("/-/quit", h.serveQuit)
}

// lifecycleAllowed answers a /-/reload or /-/quit request that may not go
// on as Prometheus does (a method other than POST and PUT, or the lifecycle
// API off) and reports whether it may.
func (h *httpServer) lifecycleAllowed(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write([]byte("Only POST or PUT requests allowed"))
		return false
	}
	if !h.cfg.rules.enableLifecycle {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("Lifecycle API is not enabled."))
		return false
	}
	return true
}

// serveQuit answers /-/quit as Prometheus does: with the lifecycle API on,
// the server stops as on SIGTERM (the head written out, exit 0).
func (h *httpServer) serveQuit(w http.ResponseWriter, r *http.Request) {
	if !h.lifecycleAllowed(w, r) {
		return
	}
	if h.quit == nil || !h.quitting.CompareAndSwap(false, true) {
		_, _ = w.Write([]byte("Termination already in progress."))
		return
	}
	h.logger.Info("stopping: termination requested on /-/quit")
	_, _ = w.Write([]byte("Requesting termination... Goodbye!"))
	h.quit() // the shutdown lets this answer finish
}

// serveReload answers /-/reload as Prometheus does.
func (h *httpServer) serveReload(w http.ResponseWriter, r *http.Request) {
	if !h.lifecycleAllowed(w, r) {
		return
	}
	rr := h.reloader.Load()
	if rr == nil {
		http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	if err := rr.reload(); err != nil {
		http.Error(w, fmt.Sprintf("failed to reload config: %s", err), http.StatusInternalServerError)
	}
}

// readerRulesHandler answers the rule and alert endpoints on a read-only
// replica, which evaluates no rule: it passes the request on to the writer
// its lease names, and otherwise answers 503 saying that the writer has
// them.
func readerRulesHandler(db *storage.DB, logger *slog.Logger) http.Handler {
	writer := writerAddress(db, logger, 10*time.Second)
	const replica = "this Shale server is a read-only replica (--mode=reader): rules and alerts are evaluated by the writer"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := writer(r.Context())
		target, err := url.Parse(a)
		if a == "" || err != nil || target.Host == "" {
			writeAPIError(w, http.StatusServiceUnavailable, replica+", whose address is not known (no live writer)")
			return
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				writeAPIError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s at %s, which could not be reached: %v", replica, a, err))
			},
		}
		proxy.ServeHTTP(w, r)
	})
}

// writeAPIError answers with the Prometheus API's error JSON.
func writeAPIError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "unavailable", "error": msg})
}

// serveRules starts the rule side once storage is open: on a writer the
// rule manager, whose state the rule and alert endpoints show; on a reader
// those endpoints pass requests on to the writer. Reload (SIGHUP, and
// POST /-/reload with --web.enable-lifecycle) works from then on. Call stop
// before closing the engine and the storage.
func (h *httpServer) serveRules(ctx context.Context, qopts promql.Options, db *storage.DB, papi *promql.API, reg prometheus.Registerer) (stop func(), err error) {
	rr, err := newRuleRuntime(h.cfg.configFile, qopts, reg, h.logger)
	if err != nil {
		return nil, err
	}
	if h.cfg.mode == "writer" {
		cors, err := promql.CompileCORS(qopts.CORSOrigin) // checked by qopts.Validate
		if err != nil {
			return nil, fmt.Errorf("cors origin: %w", err)
		}
		external := h.advertisedAddress()
		if external == "" {
			external = "http://localhost" + h.cfg.listenAddress
		}
		if err := rr.startRules(h.cfg.rules.options(), db, papi, external+"/", reg); err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		h.rules.set(rules.Handler(rr.mgr, h.logger, cors))
	} else {
		if err := rr.reload(); err != nil {
			return nil, err
		}
		h.rules.set(readerRulesHandler(db, h.logger))
	}
	h.reloader.Store(rr)
	rctx, cancel := context.WithCancel(ctx)
	rr.reloadOnSIGHUP(rctx)
	return func() { cancel(); rr.stop() }, nil
}
