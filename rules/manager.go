package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/notifier"
	"github.com/prometheus/prometheus/promql/parser"
	prules "github.com/prometheus/prometheus/rules"
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
	// NotificationQueueCapacity is how many alerts wait for Alertmanager
	// before the oldest are dropped (--alertmanager.notification-queue-capacity).
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
	// QueryFunc evaluates rule expressions (rules.EngineQueryFunc over the
	// server's engine and storage).
	QueryFunc prules.QueryFunc
	// Parser parses rule expressions; the engine's, so that rules accept
	// the language queries do.
	Parser parser.Parser
	// ExternalURL is the server's URL, used in alerts' generator URLs and
	// the templates' $externalURL.
	ExternalURL *url.URL

	Logger     *slog.Logger
	Registerer prometheus.Registerer // prometheus_rule_* and prometheus_notifications_*
}

// Manager evaluates the rule groups and sends their alerts. Call Run once,
// ApplyConfig any time, then Stop.
type Manager struct {
	opts     Options
	comps    Components
	logger   *slog.Logger
	rules    *prules.Manager
	notifier *notifier.Manager
	tsets    chan map[string][]*targetgroup.Group

	// queryOffset is the global rule_query_offset of the applied config.
	queryOffset atomic.Int64

	mu sync.Mutex // serialises ApplyConfig

	runOnce, stopOnce sync.Once
	running           sync.WaitGroup
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
	m := &Manager{
		opts:   opts,
		comps:  comps,
		logger: comps.Logger,
		tsets:  make(chan map[string][]*targetgroup.Group, 1),
	}
	m.notifier = notifier.NewManager(&notifier.Options{
		QueueCapacity:   opts.NotificationQueueCapacity,
		DrainOnShutdown: opts.DrainNotificationQueue,
		Registerer:      comps.Registerer,
	}, model.UTF8Validation, comps.Logger.With("component", "notifier"))
	m.rules = prules.NewManager(&prules.ManagerOptions{
		NameValidationScheme: model.UTF8Validation,
		ExternalURL:          comps.ExternalURL,
		QueryFunc:            comps.QueryFunc,
		NotifyFunc:           prules.SendAlerts(m.notifier, comps.ExternalURL.String()),
		AppendableV2:         comps.Appendable,
		Queryable:            comps.Queryable,
		Logger:               comps.Logger.With("component", "rule manager"),
		Registerer:           comps.Registerer,
		OutageTolerance:      opts.OutageTolerance,
		ForGracePeriod:       opts.ForGracePeriod,
		ResendDelay:          opts.ResendDelay,
		DefaultRuleQueryOffset: func() time.Duration {
			return time.Duration(m.queryOffset.Load())
		},
		Parser:                 comps.Parser,
		ConcurrentEvalsEnabled: opts.MaxConcurrentEvals > 0,
		MaxConcurrentEvals:     opts.MaxConcurrentEvals,
	})
	return m, nil
}

// Run starts evaluating the rule groups and sending alerts, and returns at
// once. Apply the first config before Run, as Prometheus does, so that the
// groups restore their alerts' 'for' state on their first evaluation.
func (m *Manager) Run() {
	m.runOnce.Do(func() {
		m.running.Add(2)
		go func() {
			defer m.running.Done()
			m.notifier.Run(m.tsets)
		}()
		go func() {
			defer m.running.Done()
			m.rules.Run()
		}()
	})
}

// Stop ends rule evaluation, then sends the alerts still queued (when
// Options.DrainNotificationQueue is set) and returns once both are done.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.Run() // a manager never run still has goroutines to end cleanly
		m.rules.Stop()
		m.notifier.Stop()
		m.running.Wait()
	})
}

// ApplyConfig checks the rule files cfg lists as promtool does and, when
// they all pass, applies cfg: the Alertmanagers and alert relabelling, then
// the rule groups (a group left unchanged keeps its state; a removed one
// writes stale markers for its series). On error the running configuration
// is kept.
func (m *Manager) ApplyConfig(cfg *config.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := CheckRuleFiles(cfg, m.comps.Parser, m.logger); err != nil {
		return err
	}
	files, err := RuleFiles(cfg)
	if err != nil {
		return err
	}
	if err := m.notifier.ApplyConfig(cfg); err != nil {
		return fmt.Errorf("apply alerting config: %w", err)
	}
	// The notifier takes targets from a discovery feed: replace any set not
	// yet taken with the new one.
	select {
	case <-m.tsets:
	default:
	}
	m.tsets <- staticTargets(cfg)

	m.queryOffset.Store(int64(cfg.GlobalConfig.RuleQueryOffset))
	if err := m.rules.Update(time.Duration(cfg.GlobalConfig.EvaluationInterval), files,
		cfg.GlobalConfig.ExternalLabels, m.comps.ExternalURL.String(), nil); err != nil {
		return fmt.Errorf("apply rule files: %w", err)
	}
	return nil
}

// RuleGroups returns the rule groups being evaluated.
func (m *Manager) RuleGroups() []*prules.Group { return m.rules.RuleGroups() }

// AlertingRules returns the alerting rules being evaluated.
func (m *Manager) AlertingRules() []*prules.AlertingRule { return m.rules.AlertingRules() }

// Alertmanagers returns the Alertmanagers alerts are sent to.
func (m *Manager) Alertmanagers() []*url.URL { return m.notifier.Alertmanagers() }

// DroppedAlertmanagers returns the Alertmanagers dropped by relabelling.
func (m *Manager) DroppedAlertmanagers() []*url.URL { return m.notifier.DroppedAlertmanagers() }

// ensure the upstream retrievers' shapes.
var _ interface {
	RuleGroups() []*prules.Group
	AlertingRules() []*prules.AlertingRule
	Alertmanagers() []*url.URL
	DroppedAlertmanagers() []*url.URL
} = (*Manager)(nil)
