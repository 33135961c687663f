package rules

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// Options are the settings of rule evaluation and notification, with the
// meaning of the Prometheus flags of the same names.
type Options struct {
	// OutageTolerance is the longest outage after which an alert's 'for'
	// state is still restored (--rules.alert.for-outage-tolerance).
	OutageTolerance time.Duration
	// ForGracePeriod is the least time an alert whose 'for' is at least
	// this long waits after a restart before it fires
	// (--rules.alert.for-grace-period).
	ForGracePeriod time.Duration
	// ResendDelay is the least time between two sends of a firing alert to
	// Alertmanager (--rules.alert.resend-delay).
	ResendDelay time.Duration
	// NotificationQueueCapacity is how many alerts wait for each
	// Alertmanager before the oldest are dropped
	// (--alertmanager.notification-queue-capacity).
	NotificationQueueCapacity int
	// DrainNotificationQueue sends the queued alerts before a shutdown ends
	// (--alertmanager.drain-notification-queue-on-shutdown).
	DrainNotificationQueue bool
	// MaxConcurrentEvals is how many rules without dependencies on other
	// rules of their group may be evaluated at once beside the groups' own
	// evaluations, across all groups (--rules.max-concurrent-rule-evals,
	// Prometheus' concurrent-rule-eval feature); 0 evaluates each group's
	// rules one after another. Each rule commits its samples on its own, and
	// a commit waits until they are durable (a WAL flush interval), so a
	// large group evaluated one rule at a time takes rules x that interval.
	MaxConcurrentEvals int64
}

// DefaultOptions returns Prometheus' defaults.
func DefaultOptions() Options {
	return Options{
		OutageTolerance:           time.Hour,
		ForGracePeriod:            10 * time.Minute,
		ResendDelay:               time.Minute,
		NotificationQueueCapacity: 10000,
		DrainNotificationQueue:    true,
		MaxConcurrentEvals:        16,
	}
}

// Validate reports settings that cannot work.
func (o Options) Validate() error {
	switch {
	case o.OutageTolerance < 0:
		return errors.New("the for-state outage tolerance must not be negative")
	case o.ForGracePeriod < 0:
		return errors.New("the for-state grace period must not be negative")
	case o.ResendDelay < 0:
		return errors.New("the alert resend delay must not be negative")
	case o.NotificationQueueCapacity <= 0:
		return errors.New("the notification queue capacity must be positive")
	case o.MaxConcurrentEvals < 0:
		return errors.New("the most concurrent rule evaluations must not be negative")
	}
	return nil
}

// Components are what the manager is built on; the server owns them. All
// but Logger and Registerer are required.
type Components struct {
	// Appendable takes recording rules' samples and the ALERTS and
	// ALERTS_FOR_STATE series.
	Appendable storage.AppendableV2
	// Queryable is read to restore alerts' 'for' state.
	Queryable storage.Queryable
	// QueryFunc evaluates rule expressions (EngineQueryFunc over the
	// server's engine and storage).
	QueryFunc QueryFunc
	// Parser parses rule expressions; the engine's, so that rules accept
	// the language queries do.
	Parser parser.Parser
	// ExternalURL is the server's URL, used in alerts' generator URLs and
	// the templates' $externalURL.
	ExternalURL *url.URL

	Logger     *slog.Logger
	Registerer prometheus.Registerer // prometheus_rule_* and prometheus_notifications_*
}

// Manager evaluates the rule groups and sends their alerts. Call
// ApplyConfig, then Run once, ApplyConfig any time, then Stop.
type Manager struct {
	opts     Options
	comps    Components
	logger   *slog.Logger
	metrics  *metrics
	notifier *notifier
	env      groupEnv // shared by all groups; the per-config fields are read through funcs

	// queryOffset is the global rule_query_offset of the applied config.
	queryOffset atomic.Int64

	applyMu  sync.Mutex // serialises ApplyConfig and Stop
	mu       sync.RWMutex
	groups   map[string]*Group
	restored bool // the first config has been applied: later groups need no restoring

	started  chan struct{} // closed by Run
	done     chan struct{} // closed by Stop once the groups have stopped
	groupsWG sync.WaitGroup
	staleWG  sync.WaitGroup

	runOnce, stopOnce sync.Once
	stopped           bool
}

// New builds a manager; it evaluates nothing before Run and ApplyConfig.
func New(opts Options, comps Components) (*Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("rules options: %w", err)
	}
	if comps.Appendable == nil || comps.Queryable == nil || comps.QueryFunc == nil || comps.Parser == nil {
		return nil, errors.New("rules: Components.Appendable, Queryable, QueryFunc and Parser are required")
	}
	if comps.Logger == nil {
		comps.Logger = slog.New(slog.DiscardHandler)
	}
	if comps.ExternalURL == nil {
		comps.ExternalURL = &url.URL{Scheme: "http", Host: "localhost"}
	}
	met, err := newMetrics(comps.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		opts: opts, comps: comps, logger: comps.Logger, metrics: met,
		groups:  map[string]*Group{},
		started: make(chan struct{}),
		done:    make(chan struct{}),
	}
	m.notifier, err = newNotifier(notifierOptions{
		queueCapacity: opts.NotificationQueueCapacity,
		drain:         opts.DrainNotificationQueue,
		maxBatch:      maxBatchSize,
	}, comps.Registerer, comps.Logger.With("component", "notifier"))
	if err != nil {
		return nil, err
	}
	var sema chan struct{}
	if opts.MaxConcurrentEvals > 0 {
		sema = make(chan struct{}, opts.MaxConcurrentEvals)
	}
	external := comps.ExternalURL.String()
	m.env = groupEnv{
		appendable:  comps.Appendable,
		queryable:   comps.Queryable,
		query:       comps.QueryFunc,
		externalURL: comps.ExternalURL,
		notify: func(expr string, alerts []*Alert) {
			m.notifier.send(toNotifierAlerts(external, expr, alerts)...)
		},
		defaultOffset:   func() time.Duration { return time.Duration(m.queryOffset.Load()) },
		outageTolerance: opts.OutageTolerance,
		forGracePeriod:  opts.ForGracePeriod,
		resendDelay:     opts.ResendDelay,
		sema:            sema,
		metrics:         met,
		logger:          comps.Logger.With("component", "rule manager"),
		now:             time.Now,
		managerDone:     m.done,
		staleWG:         &m.staleWG,
	}
	return m, nil
}

// Run starts evaluating the rule groups, and returns at once. Apply the
// first config before Run, as Prometheus does, so that the groups restore
// their alerts' 'for' state.
func (m *Manager) Run() {
	m.runOnce.Do(func() {
		m.logger.Info("Starting rule manager...")
		close(m.started)
	})
}

// Stop ends rule evaluation, then sends the alerts still queued (when
// Options.DrainNotificationQueue is set) and returns once both are done.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.applyMu.Lock()
		m.stopped = true
		m.applyMu.Unlock()
		m.Run() // a group never run still has its goroutine to end
		m.mu.RLock()
		groups := slices.Collect(maps.Values(m.groups))
		m.mu.RUnlock()
		stopAll(groups)
		m.groupsWG.Wait()
		close(m.done)
		m.staleWG.Wait()
		m.notifier.stop()
		m.logger.Info("Rule manager stopped")
	})
}

// stopAll stops each of xs in its own goroutine and returns once all have
// stopped.
func stopAll[T interface{ stop() }](xs []T) {
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.stop()
		}()
	}
	wg.Wait()
}

// ApplyConfig checks the rule files cfg lists as promtool does and, when
// they all pass, applies cfg: the Alertmanagers and alert relabelling, then
// the rule groups (a group left unchanged keeps its state; a removed one
// writes stale markers for its series). On error the running configuration
// is kept.
func (m *Manager) ApplyConfig(cfg *Config) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	if m.stopped {
		return nil
	}
	files, err := loadRuleFiles(cfg, m.comps.Parser, m.logger)
	if err != nil {
		return err
	}
	groups, err := m.buildGroups(cfg, files)
	if err != nil {
		return fmt.Errorf("apply rule files: %w", err)
	}
	if err := m.notifier.applyConfig(cfg); err != nil {
		return fmt.Errorf("apply alerting config: %w", err)
	}
	m.queryOffset.Store(int64(cfg.Global.RuleQueryOffset))
	m.update(groups)
	return nil
}

// buildGroups makes the groups of the parsed rule files.
func (m *Manager) buildGroups(cfg *Config, files []ruleFile) (map[string]*Group, error) {
	shouldRestore := !m.restored
	external := m.comps.ExternalURL.String()
	groups := map[string]*Group{}
	for _, f := range files {
		for _, rg := range f.groups {
			interval := time.Duration(cfg.Global.EvaluationInterval)
			if rg.Interval != 0 {
				interval = time.Duration(rg.Interval)
			}
			rules := make([]Rule, 0, len(rg.Rules))
			for _, r := range rg.Rules {
				expr, err := m.comps.Parser.ParseExpr(r.Expr)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f.name, err)
				}
				ls := map[string]string{}
				maps.Copy(ls, rg.Labels)
				maps.Copy(ls, r.Labels)
				if r.Alert != "" {
					rules = append(rules, newAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
						labels.FromMap(ls), labels.FromMap(r.Annotations), cfg.Global.ExternalLabels, external,
						!shouldRestore, m.logger.With("alert", r.Alert)))
					continue
				}
				rules = append(rules, newRecordingRule(r.Record, expr, labels.FromMap(ls)))
			}
			g := newGroup(rg.Name, f.name, interval, rg.Limit, (*time.Duration)(rg.QueryOffset), rules, &m.env, shouldRestore)
			groups[groupKey(f.name, rg.Name)] = g
		}
	}
	return groups, nil
}

// update replaces the groups in force with groups: an unchanged group goes
// on as it is; a changed one takes over its predecessor's state once that
// has stopped; a removed one stops and marks its series stale.
func (m *Manager) update(groups map[string]*Group) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.restored = true
	var wg sync.WaitGroup
	for key, ng := range groups {
		old, ok := m.groups[key]
		delete(m.groups, key)
		if ok && old.equal(ng) {
			groups[key] = old
			continue
		}
		m.metrics.addGroup(key, ng)
		wg.Add(1)
		m.groupsWG.Add(1)
		go func() {
			defer m.groupsWG.Done()
			if ok {
				old.stop()
				ng.copyState(old)
			}
			wg.Done()
			select {
			case <-m.started:
			case <-ng.done:
				close(ng.terminated)
				return
			}
			ng.run(context.Background())
		}()
	}
	for key, old := range m.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			old.markStale = true
			old.stop()
			m.metrics.deleteGroup(key)
		}()
	}
	wg.Wait()
	m.groups = groups
}

// RuleGroups returns the rule groups being evaluated, by file and name.
func (m *Manager) RuleGroups() []*Group {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := slices.Collect(maps.Values(m.groups))
	slices.SortFunc(out, func(a, b *Group) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.name, b.name))
	})
	return out
}

// AlertingRules returns the alerting rules being evaluated.
func (m *Manager) AlertingRules() []*AlertingRule {
	var out []*AlertingRule
	for _, g := range m.RuleGroups() {
		for _, r := range g.rules {
			if ar, ok := r.(*AlertingRule); ok {
				out = append(out, ar)
			}
		}
	}
	return out
}

// Alertmanagers returns the Alertmanagers alerts are sent to.
func (m *Manager) Alertmanagers() []*url.URL { return m.notifier.alertmanagers(false) }

// DroppedAlertmanagers returns the Alertmanagers dropped by relabelling.
func (m *Manager) DroppedAlertmanagers() []*url.URL { return m.notifier.alertmanagers(true) }

var _ Source = (*Manager)(nil)
