package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/rules"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// Rule benchmark shape: 100 metrics of 1,000 series each (10 jobs x 100
// instances), scraped every 15 s; 10 groups of 100 recording rules, 10 a
// metric, evaluated every 15 s.
const (
	benchMetrics   = 100
	benchJobs      = 10
	benchInstances = 100
	benchGroups    = 10
	benchStep      = 15 * time.Second
)

// benchRuleExprs are the 10 rules of one metric, of the kinds recording
// rules use.
var benchRuleExprs = []string{
	`sum by (job) (rate(%s[5m]))`,
	`sum by (instance) (rate(%s[5m]))`,
	`max by (job) (%s)`,
	`avg by (job) (%s)`,
	`count by (job) (%s)`,
	`sum(rate(%s{job="j1"}[5m]))`,
	`quantile by (job) (0.9, rate(%s[5m]))`,
	`sum by (job) (increase(%s[1m]))`,
	`topk(5, rate(%s[5m]))`,
	`sum without (instance) (irate(%s[1m]))`,
}

// benchConcurrency is --rules.max-concurrent-rule-evals for the benchmark:
// SHALE_BENCH_RULE_CONCURRENCY, else the server's default.
func benchConcurrency() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SHALE_BENCH_RULE_CONCURRENCY"), 10, 64); err == nil {
		return v
	}
	return rules.DefaultOptions().MaxConcurrentEvals
}

// BenchmarkRecordingRules evaluates 1,000 recording rules (10 groups of
// 100, concurrently, as the rule manager runs them) over 100,000 active
// series while a writer appends the next scrape of every series each step,
// as ingest would at a 15 s scrape interval. Each iteration is one 15 s
// step: the groups' evaluation at it, writing their results through the
// storage's appender. It reports the slowest group's time
// (prometheus_rule_group_last_duration_seconds) and the steps whose slowest
// group took longer than the 15 s interval (a missed iteration).
//
// The storage's WAL flush interval is the LSM's default, 100ms, the
// server's on S3 (10ms on the local folder).
//
//	go test ./cmd/tsdb -run '^$' -bench BenchmarkRecordingRules -benchtime 5x
func BenchmarkRecordingRules(b *testing.B) {
	ctx := context.Background()
	opts := storage.DefaultOptions()
	opts.OutOfOrderWindow = 24 * time.Hour
	opts.Retention = 0
	lopts := lsm.DefaultOptions()
	db, err := openWriter(ctx, objstore.NewMemoryBucket(), "", opts, lopts, nil, storage.Components{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()

	series := make([]labels.Labels, 0, benchMetrics*benchJobs*benchInstances)
	for m := range benchMetrics {
		for j := range benchJobs {
			for i := range benchInstances {
				series = append(series, labels.FromStrings("__name__", fmt.Sprintf("bench_metric_%d", m),
					"instance", fmt.Sprintf("i%d", i), "job", fmt.Sprintf("j%d", j)))
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	values := make([]float64, len(series))
	scrape := func(ts time.Time) {
		app := db.AppenderV2(ctx)
		for k, ls := range series {
			values[k] += float64(rng.IntN(100))
			if _, err := app.Append(0, ls, 0, ts.UnixMilli(), values[k], nil, nil, promstorage.AppendV2Options{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	// 10 minutes of history, then one scrape a step.
	start := time.Now().Add(-10 * time.Minute).Truncate(benchStep)
	t := start
	for ; t.Before(start.Add(10 * time.Minute)); t = t.Add(benchStep) {
		scrape(t)
	}

	qopts := promql.DefaultOptions()
	ng, err := promql.NewEngine(qopts, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ng.Close()
	// The groups as a rule file, applied to a manager that is not run: the
	// benchmark evaluates them itself, at each step.
	var text strings.Builder
	text.WriteString("groups:\n")
	for g := range benchGroups {
		fmt.Fprintf(&text, "- name: g%d\n  interval: %s\n  rules:\n", g, model.Duration(benchStep))
		for m := g * benchMetrics / benchGroups; m < (g+1)*benchMetrics/benchGroups; m++ {
			for r, e := range benchRuleExprs {
				fmt.Fprintf(&text, "  - record: bench:metric_%d:rule_%d\n    expr: %q\n", m, r, fmt.Sprintf(e, fmt.Sprintf("bench_metric_%d", m)))
			}
		}
	}
	rulePath := filepath.Join(b.TempDir(), "bench.rules.yml")
	if err := os.WriteFile(rulePath, []byte(text.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	ropts := rules.DefaultOptions()
	ropts.MaxConcurrentEvals = benchConcurrency()
	mgr, err := rules.New(ropts, rules.Components{
		Appendable: db, Queryable: db, QueryFunc: promql.EngineQueryFunc(ng, db),
		Parser: promql.NewParser(qopts), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer mgr.Stop()
	cfg := rules.DefaultConfig()
	cfg.RuleFiles = []string{rulePath}
	if err := mgr.ApplyConfig(cfg); err != nil {
		b.Fatal(err)
	}
	groups := mgr.RuleGroups()

	var slowest, sum time.Duration
	missed := 0
	b.ResetTimer()
	for b.Loop() {
		t = t.Add(benchStep)
		var ingest sync.WaitGroup
		ingest.Add(1)
		go func() { defer ingest.Done(); scrape(t) }()
		var wg sync.WaitGroup
		durations := make([]time.Duration, len(groups))
		for k, g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				began := time.Now()
				g.Eval(ctx, t)
				durations[k] = time.Since(began)
			}()
		}
		wg.Wait()
		ingest.Wait()
		step := time.Duration(0)
		for _, d := range durations {
			step = max(step, d)
		}
		sum += step
		slowest = max(slowest, step)
		if step > benchStep {
			missed++
		}
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if err := r.LastError(); err != nil {
				b.Fatalf("rule %s: %v", r.Name(), err)
			}
		}
	}
	b.ReportMetric(sum.Seconds()/float64(b.N), "group-s/eval")
	b.ReportMetric(slowest.Seconds(), "max-group-s")
	b.ReportMetric(float64(missed), "missed")
}
