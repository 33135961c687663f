package promql

import (
	"errors"
	"strings"
	"testing"
	"time"

	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/shaledb/shale/internal/race"
)

func TestQueryDepth(t *testing.T) {
	cases := []struct {
		name  string
		query string
		want  int
	}{
		{"selector", `up`, 0},
		{"braces", `up{job="api"}`, 1},
		{"matchers are not operators", `up{job!="a",env=~"p.*",x!~"y",z="w"}`, 1},
		{"parentheses", `((up))`, 2},
		{"function and range", `rate(up[5m])`, 2},
		{"binary chain", `a + b - c * d`, 3},
		{"comparison operators", `a == b != c >= d <= e > f < g`, 6},
		{"keyword operators", `a and b or c unless d`, 3},
		{"keywords any case", `a AND b Or c`, 2},
		{"atan2", `a atan2 b`, 1},
		{"names are not keywords", `order + android + unless_total`, 2},
		{"unary chain", `---up`, 3},
		{"operators in a level", `sum(a + b + c)`, 3},
		{"level ends with its operators", `sum(a + b + c) + d`, 3},
		{"subquery", `max_over_time(rate(x[5m])[1h:1m])`, 3},
		{"string with brackets", `label_replace(up, "a", "((((", "b", "[[[{")`, 1},
		{"escaped quote", `label_replace(up, "a", "\"(((", "b", 'x\'((')`, 1},
		{"raw string", "label_replace(up, `a`, `((((`, `b`, `c`)", 1},
		{"comment", "up # ((((((\n+ up", 1},
		{"unbalanced closing", `)))up`, 0},
		{"unbalanced opening", `(((up`, 3},
		{"utf8 name", `{"http.server.duration"} or σ`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, queryDepth(c.query, 0), c.query)
		})
	}
	// A limit stops the scan at the first level past it.
	require.Equal(t, 11, queryDepth(strings.Repeat("(", 1_000_000), 10))
}

// adversarial are query texts whose parse time grows with length × depth;
// n scales them.
func adversarial(n int) map[string]string {
	return map[string]string{
		"nested parentheses": strings.Repeat("(", n) + "x" + strings.Repeat(")", n),
		"unary minus signs":  strings.Repeat("-", n) + "x",
		"binary chain":       "1" + strings.Repeat("+1", n),
		"nested functions":   strings.Repeat("abs(", n) + "x" + strings.Repeat(")", n),
		"nested braces":      strings.Repeat("{", n),
	}
}

// balanced is a balanced tree of additions of the given height in
// parentheses: every node is a parenthesis or an operator above a chain the
// parser type-checks again at each level.
func balanced(height int) string {
	if height == 0 {
		return "1"
	}
	s := balanced(height - 1)
	return "(" + s + "+" + s + ")"
}

// TestParseBounded checks that the worst texts within the default limits
// parse quickly, and that longer or deeper ones are refused before parsing.
// Unbounded, the first over-limit text below takes minutes to parse and
// cannot be stopped.
func TestParseBounded(t *testing.T) {
	opts := DefaultOptions()
	p := NewParser(opts)
	// Well below the default query timeout: they take ~0.2 s, ~2.5 s with
	// the race detector.
	bound := 10 * time.Second
	if race.Enabled {
		bound = time.Minute
	}
	parse := func(t *testing.T, q string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := p.ParseExpr(q)
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(bound):
			t.Fatalf("parsing %d bytes took more than %s", len(q), bound)
			return nil
		}
	}

	within := map[string]string{
		// The deepest chains, and a wide tree under the deepest spine that
		// fits the length: every node type-checks ~200 levels beneath it.
		"spine over a wide tree": strings.Repeat("(", opts.MaxQueryDepth-2*15-2) + balanced(15) + strings.Repeat(")", opts.MaxQueryDepth-2*15-2),
	}
	for name, q := range adversarial(opts.MaxQueryDepth) {
		within[name] = q
	}
	for name, q := range within {
		t.Run("within/"+name, func(t *testing.T) {
			require.LessOrEqual(t, len(q), opts.MaxQueryLength)
			require.LessOrEqual(t, queryDepth(q, 0), opts.MaxQueryDepth)
			start := time.Now()
			err := parse(t, q)
			require.False(t, errors.Is(err, ErrQueryTooDeep) || errors.Is(err, ErrQueryTooLong), "refused: %v", err)
			t.Logf("%d bytes, depth %d: parsed in %s", len(q), queryDepth(q, 0), time.Since(start))
		})
	}

	over := map[string]string{}
	for name, q := range adversarial(opts.MaxQueryDepth + 1) {
		over["deep "+name] = q
	}
	for name, q := range adversarial(1_000_000) {
		over["1M "+name] = q
	}
	over["5M unary minus signs"] = strings.Repeat("-", 5_000_000) + "x"
	over["long"] = `up{job="` + strings.Repeat("a", opts.MaxQueryLength) + `"}`
	over["chain of keyword operators"] = "x" + strings.Repeat(" or x", opts.MaxQueryDepth+1)
	for name, q := range over {
		t.Run("over/"+name, func(t *testing.T) {
			err := parse(t, q)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrQueryTooDeep) || errors.Is(err, ErrQueryTooLong), "not refused: %v", err)
		})
	}
}

func TestParserMethodsLimited(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxQueryLength = 32
	p := NewParser(opts)
	long := `up{job="` + strings.Repeat("a", 32) + `"}`
	_, err := p.ParseExpr(long)
	require.ErrorIs(t, err, ErrQueryTooLong)
	_, err = p.ParseMetric(long)
	require.ErrorIs(t, err, ErrQueryTooLong)
	_, err = p.ParseMetricSelector(long)
	require.ErrorIs(t, err, ErrQueryTooLong)
	_, err = p.ParseMetricSelectors([]string{"up", long})
	require.ErrorIs(t, err, ErrQueryTooLong)
	_, _, err = p.ParseSeriesDesc(long)
	require.ErrorIs(t, err, ErrQueryTooLong)
	_, err = p.ParseExpr(`up{job="a"}`)
	require.NoError(t, err)
}

func TestSubquerySteps(t *testing.T) {
	day, hour, minute := 24*time.Hour, time.Hour, time.Minute
	steps := func(span, step time.Duration) int64 { return int64(span / step) }
	at := time.Unix(1_700_000_040, 0) // on a whole minute
	cases := []struct {
		name       string
		query      string
		start, end time.Time
		step       time.Duration
		want       int64
	}{
		{"no subquery", `rate(x[5m])`, at, at, 0, 0},
		{"instant", `sum_over_time(x[1h:1m])`, at, at, 0, steps(hour, minute)},
		{"the 44 GB query", `sum_over_time(x[30d:1ms])`, at, at, 0, steps(30*day, time.Millisecond)},
		{"default step", `max_over_time(x[1h:])`, at, at, 0, steps(hour, minute)},
		{"offset keeps the count", `sum_over_time(x[1h:1m] offset 1d)`, at, at, 0, steps(hour, minute)},
		// A subquery runs once over the query's range widened by its own.
		{"range query", `sum_over_time(x[1h:1m])`, at, at.Add(day), 5 * minute, steps(day+hour, minute)},
		{"two subqueries add up", `sum_over_time(x[1h:1m]) + max_over_time(x[2h:1m])`, at, at, 0, steps(hour, minute) + steps(2*hour, minute)},
		// A nested one runs over its parent's steps, 6 from the first to the
		// last 50m later, widened by its own range.
		{"nested", `max_over_time(sum_over_time(x[10m:1m])[1h:10m])`, at, at, 0, steps(hour, 10*minute) + steps(50*minute+10*minute, minute)},
		// Under @ the parent range is one instant, whatever the query's range.
		{"@ modifier", `sum_over_time(x[1h:1m] @ 1700000040)`, at, at.Add(day), 5 * minute, steps(hour, minute)},
		{"step invariant", `sum_over_time(x[1h:1m] @ start())`, at, at.Add(day), 5 * minute, steps(hour, minute)},
	}
	p := parser.NewParser(parser.Options{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expr, err := p.ParseExpr(c.query)
			require.NoError(t, err)
			expr, err = upstream.PreprocessExpr(expr, c.start, c.end, c.step)
			require.NoError(t, err)
			stmt := &parser.EvalStmt{Expr: expr, Start: c.start, End: c.end, Interval: c.step}
			require.Equal(t, c.want, subquerySteps(stmt, noStepSubqueryInterval))
		})
	}
}
