package promql

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/features"

	"github.com/shaledb/shale/internal/promreg"
)

// NewParser returns the PromQL parser the settings ask for, refusing texts
// beyond MaxQueryLength and MaxQueryDepth before it parses them. The engine
// and the HTTP API must share one so that both accept the same language.
func NewParser(opts Options) parser.Parser {
	return newParser(opts, nil)
}

func newParser(opts Options, refused *prometheus.CounterVec) parser.Parser {
	return &limitedParser{
		Parser: parser.NewParser(parser.Options{
			EnableExperimentalFunctions: opts.EnableExperimentalFunctions,
			EnableBinopFillModifiers:    opts.EnableBinopFillModifiers,
			EnableUnquotedUTF8Names:     opts.EnableUnquotedUTF8Names,
		}),
		limits: textLimits{maxLength: opts.MaxQueryLength, maxDepth: opts.MaxQueryDepth, refused: refused},
	}
}

// NewEngine returns the upstream PromQL engine configured by opts. Queries
// beyond opts.MaxConcurrentQueries wait for a slot. reg may be nil; the
// engine's own metrics keep their upstream names (prometheus_engine_*), the
// concurrency gate's are shale_promql_*. Close the engine when done.
//
// Its parser (NewParser when p is nil) refuses queries beyond the length and
// depth limits; the subquery-step limit and the memory budget wrap the engine
// in NewAPI and bound only the HTTP API's queries.
func NewEngine(opts Options, p parser.Parser, logger *slog.Logger, reg prometheus.Registerer) (*upstream.Engine, error) {
	return newEngine(opts, p, logger, reg, nil)
}

func newEngine(opts Options, p parser.Parser, logger *slog.Logger, reg prometheus.Registerer, fr features.Collector) (*upstream.Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("promql options: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if p == nil {
		p = NewParser(opts)
	}
	gate, err := newQueryGate(opts.MaxConcurrentQueries, reg)
	if err != nil {
		return nil, err
	}
	ng := upstream.NewEngine(upstream.EngineOpts{
		Logger:             logger,
		Reg:                reg,
		MaxSamples:         opts.MaxSamples,
		Timeout:            opts.QueryTimeout,
		ActiveQueryTracker: gate,
		LookbackDelta:      opts.LookbackDelta,
		// Prometheus' default resolution for subqueries without a step is the
		// global evaluation interval, 1m unless configured.
		NoStepSubqueryIntervalFn: noStepSubqueryInterval,
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		EnablePerStepStats:       opts.EnablePerStepStats,
		EnableDelayedNameRemoval: opts.EnableDelayedNameRemoval,
		UseStartTimestamps:       opts.UseStartTimestamps,
		Parser:                   p,
		FeatureRegistry:          fr,
		// Series and samples-read budgets are enforced by the engine's cost
		// accounting, which is off unless a budget is set.
		EnableQueryCost: opts.MaxSeries > 0 || opts.MaxSamplesRead > 0,
	})
	ng.SetQueryLimits(opts.MaxSeries, opts.MaxSamplesRead, 0)
	return ng, nil
}

// queryGate limits concurrent queries with a semaphore. It takes the place of
// the upstream file-backed ActiveQueryTracker: Shale keeps no local state
// that must survive a crash, so there is no log of queries that were running.
type queryGate struct {
	slots   chan struct{}
	waiting prometheus.Gauge
	active  prometheus.Gauge
}

var _ upstream.QueryTracker = (*queryGate)(nil)

func newQueryGate(maxConcurrent int, reg prometheus.Registerer) (*queryGate, error) {
	set := promreg.NewSet(reg)
	g := &queryGate{
		slots:   make(chan struct{}, maxConcurrent),
		waiting: set.Gauge("shale_promql_queries_waiting", "Queries waiting for a free evaluation slot."),
		active:  set.Gauge("shale_promql_queries_active", "Queries holding an evaluation slot."),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("register query gate metrics: %w", err)
	}
	return g, nil
}

func (g *queryGate) GetMaxConcurrent() int { return cap(g.slots) }

// Insert blocks until a slot is free and, for a query that carries a memory
// account, until the memory budget has room for it to start; or until ctx
// ends. The index it returns carries no meaning: slots are interchangeable.
func (g *queryGate) Insert(ctx context.Context, _ string) (int, error) {
	queued := false
	select {
	case g.slots <- struct{}{}:
	default:
		queued = true
		g.waiting.Inc()
		defer g.waiting.Dec()
		select {
		case g.slots <- struct{}{}:
		case <-ctx.Done():
			return 0, queueError(ctx.Err(), "query queue")
		}
	}
	if acct := accountFrom(ctx); acct != nil && !acct.b.hasRoom() {
		if !queued {
			g.waiting.Inc()
			defer g.waiting.Dec()
		}
		if err := acct.b.admit(ctx); err != nil {
			<-g.slots
			return 0, err
		}
	}
	g.active.Inc()
	return 0, nil
}

func (g *queryGate) Delete(int) {
	<-g.slots
	g.active.Dec()
}

func (g *queryGate) Close() error { return nil }
