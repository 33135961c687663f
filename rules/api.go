package rules

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/util/notifications"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// Paths are the API paths Handler answers; mount it on each of them.
var Paths = []string{"/api/v1/rules", "/api/v1/alerts", "/api/v1/alertmanagers"}

// Source is what the API reports: a Manager satisfies it.
type Source interface {
	v1.RulesRetriever
	v1.AlertmanagerRetriever
}

// Handler serves GET /api/v1/rules (with the type, rule_name[],
// rule_group[], file[], match[], exclude_alerts, group_limit and
// group_next_token parameters), /api/v1/alerts and /api/v1/alertmanagers
// from src, with the upstream API's code: the answers are Prometheus'.
// Other paths answer 404.
func Handler(src Source, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	api := v1.NewAPI(
		nil, nil, nil, nil, // no queries here: the query API serves them
		func(context.Context) v1.ScrapePoolsRetriever { return noScrape{} },
		func(context.Context) v1.TargetRetriever { return noScrape{} },
		func(context.Context) v1.AlertmanagerRetriever { return src },
		func() config.Config { return config.DefaultConfig },
		map[string]string{},
		v1.GlobalURLOptions{Scheme: "http"},
		func(f http.HandlerFunc) http.HandlerFunc { return f },
		nil, "", false, false, 0,
		logger,
		func(context.Context) v1.RulesRetriever { return src },
		0, 0, 0, false, nil,
		func() (v1.RuntimeInfo, error) { return v1.RuntimeInfo{}, nil },
		&v1.PrometheusVersion{},
		func() []notifications.Notification { return nil },
		func() (<-chan notifications.Notification, func(), bool) { return nil, func() {}, false },
		prometheus.NewRegistry(), prometheus.NewRegistry(), // metrics of the unused remote-read handler
		nil, false, nil, false, false, false, 0, false, false, nil, nil,
		v1.OpenAPIOptions{}, nil, false, 0,
	)
	router := route.New()
	api.Register(router)
	mux := http.NewServeMux()
	strip := http.StripPrefix("/api/v1", router)
	for _, p := range Paths {
		mux.Handle(p, strip)
	}
	return mux
}

// noScrape stands for the scrape manager the upstream API asks for; the
// paths it serves are not routed here.
type noScrape struct{}

func (noScrape) ScrapePools() []string                       { return nil }
func (noScrape) TargetsActive() map[string][]*scrape.Target  { return nil }
func (noScrape) TargetsDropped() map[string][]*scrape.Target { return nil }
func (noScrape) TargetsDroppedCounts() map[string]int        { return nil }
func (noScrape) ScrapePoolConfig(string) (*config.ScrapeConfig, error) {
	return nil, nil
}

// Empty is a Source with no rules and no Alertmanagers.
type Empty struct{}

// RuleGroups returns no group.
func (Empty) RuleGroups() []*rules.Group { return nil }

// AlertingRules returns no rule.
func (Empty) AlertingRules() []*rules.AlertingRule { return nil }

// Alertmanagers returns no Alertmanager.
func (Empty) Alertmanagers() []*url.URL { return nil }

// DroppedAlertmanagers returns no Alertmanager.
func (Empty) DroppedAlertmanagers() []*url.URL { return nil }
