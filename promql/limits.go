package promql

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// Query limits Prometheus does not have. The length and depth of a query are
// checked on its text before the upstream parser sees it; the steps of its
// subqueries after parsing, before evaluation. docs/query-limits.md describes
// them for users.
//
// Why before parsing: the upstream parser (goyacc, promql/parser) builds the
// tree with an explicit stack, but then type-checks it recursively, and the
// Type method of a parenthesis, a unary or a binary expression recomputes the
// type of the whole chain beneath it. Parse time therefore grows with
// length × depth: measured on this module's parser (v0.316.0), 64,000 nested
// parentheses take ~9 s, 64,000 unary minus signs ~8 s, and the flat chain
// 1+1+...+1 of 64,000 operators ~26 s; 1M parentheses kept a core busy for
// 11+ minutes and could not be stopped, because the parser takes no context.
// Deep enough, the recursion kills the process: 1M nested calls abs(abs(...
// (a 4 MB POST) overflow the 1 GB goroutine stack in checkAST after ~9 s,
// "fatal error: stack overflow", which no recover catches.
// Other users of the upstream parser measured the same super-linear growth
// (metrico/gigapipe#968: 3,000 nested parentheses ~0.1 s, ~n^1.75). Prometheus
// has no such guard: only Go's HTTP server defaults bound a query, to 1 MiB
// of header in a GET and 10 MB of form in a POST (web/web.go sets neither).
//
// With both limits the tree is at most MaxQueryDepth deep and parsing costs
// at most length × depth Type calls: the worst queries under the defaults
// parse in well under a second (TestParseBounded), so the parse needs no
// goroutine of its own to be abandoned when the client goes away.

// Refusal reasons, the values of the reason label of
// shale_promql_queries_refused_total.
const (
	refusedTooLong       = "too_long"
	refusedTooDeep       = "too_deep"
	refusedSubquerySteps = "subquery_steps"
	refusedMemory        = "memory_budget"
)

var (
	// ErrQueryTooLong is returned for a query longer than Options.MaxQueryLength.
	ErrQueryTooLong = errors.New("query too long")
	// ErrQueryTooDeep is returned for a query nested deeper than Options.MaxQueryDepth.
	ErrQueryTooDeep = errors.New("query nested too deeply")
	// ErrTooManySubquerySteps is returned for a query whose subqueries would
	// take more than Options.MaxSubquerySteps evaluation steps.
	ErrTooManySubquerySteps = errors.New("too many subquery steps")
)

// queryDepth returns the nesting depth of a query's text, or a number above
// limit as soon as it finds one (limit 0: the whole text is scanned). Each
// open parenthesis, bracket and brace is a level, and so is each operator
// met at the current level (left of it, the tree of a chain a+b+c or of
// unary signs ---a is one node deeper per operator). It bounds the depth of
// the parsed tree from above: every node of the tree but selectors and
// literals comes from a bracket or an operator. Operators inside braces
// (label matchers) are not counted: they nest nothing. Text in strings and
// comments is skipped. The scan is linear and allocates only past 64 open
// levels.
func queryDepth(q string, limit int) int {
	var (
		depth, maxDepth int
		// stack[i] is the depth added by the i-th open level: 1 for the
		// bracket plus its operators so far.
		stack  [64]int
		levels []int = stack[:0]
		braces int   // open braces: inside them operators are matchers
	)
	op := func() {
		if braces > 0 {
			return
		}
		depth++
		if len(levels) > 0 {
			levels[len(levels)-1]++
		}
	}
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '#':
			for i < len(q) && q[i] != '\n' && q[i] != '\r' {
				i++
			}
		case '"', '\'':
			for i++; i < len(q) && q[i] != c; i++ {
				if q[i] == '\\' {
					i++
				}
			}
		case '`':
			for i++; i < len(q) && q[i] != '`'; i++ {
			}
		case '(', '[', '{':
			if c == '{' {
				braces++
			}
			levels = append(levels, 1)
			depth++
		case ')', ']', '}':
			if len(levels) == 0 {
				continue // unbalanced: the parser will say so
			}
			if c == '}' && braces > 0 {
				braces--
			}
			depth -= levels[len(levels)-1]
			levels = levels[:len(levels)-1]
		case '+', '-', '*', '/', '%', '^', '<', '>':
			if i+1 < len(q) && q[i+1] == '=' {
				i++
			}
			op()
		case '=', '!':
			// ==, != and, inside braces only, =, =~ and !~.
			if i+1 < len(q) && (q[i+1] == '=' || q[i+1] == '~') {
				i++
			}
			op()
		default:
			if !isNameByte(c) {
				continue
			}
			start := i
			for i+1 < len(q) && (isNameByte(q[i+1]) || q[i+1] >= '0' && q[i+1] <= '9') {
				i++
			}
			if isKeywordOperator(q[start : i+1]) {
				op()
			}
		}
		if depth > maxDepth {
			maxDepth = depth
			if limit > 0 && maxDepth > limit {
				return maxDepth
			}
		}
	}
	return maxDepth
}

// isNameByte reports whether c may start an identifier: ASCII letters, '_',
// ':', '.' and, so as not to split one, any byte of a multi-byte UTF-8 rune.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || c == '.' || c >= 0x80
}

// isKeywordOperator reports whether an identifier is a binary operator
// spelled as a word; PromQL keywords are case-insensitive.
func isKeywordOperator(w string) bool {
	if len(w) < 2 || len(w) > 6 {
		return false
	}
	var b [6]byte
	for i := range len(w) {
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	switch string(b[:len(w)]) {
	case "and", "or", "unless", "atan2":
		return true
	}
	return false
}

// textLimits are the limits checked on a query's text before parsing.
type textLimits struct {
	maxLength, maxDepth int
	// refused counts refusals by reason; nil counts nothing.
	refused *prometheus.CounterVec
}

func (l textLimits) check(q string) error {
	if l.maxLength > 0 && len(q) > l.maxLength {
		l.count(refusedTooLong)
		return fmt.Errorf("%w: %d bytes, more than the limit of %d (--query.max-length)", ErrQueryTooLong, len(q), l.maxLength)
	}
	if l.maxDepth > 0 {
		if d := queryDepth(q, l.maxDepth); d > l.maxDepth {
			l.count(refusedTooDeep)
			return fmt.Errorf("%w: more than %d levels of parentheses, brackets, braces and operators (--query.max-depth)", ErrQueryTooDeep, l.maxDepth)
		}
	}
	return nil
}

func (l textLimits) count(reason string) { countRefusal(l.refused, reason) }

// countRefusal counts a refused query; a nil counter counts nothing.
func countRefusal(refused *prometheus.CounterVec, reason string) {
	if refused != nil {
		refused.WithLabelValues(reason).Inc()
	}
}

// limitedParser checks every text against the limits before the upstream
// parser sees it. The engine and the HTTP API (format_query, parse_query,
// query_exemplars, the match[] of series and labels) share it.
type limitedParser struct {
	parser.Parser
	limits textLimits
}

func (p *limitedParser) ParseExpr(input string) (parser.Expr, error) {
	if err := p.limits.check(input); err != nil {
		return nil, err
	}
	return p.Parser.ParseExpr(input)
}

func (p *limitedParser) ParseMetric(input string) (labels.Labels, error) {
	if err := p.limits.check(input); err != nil {
		return labels.EmptyLabels(), err
	}
	return p.Parser.ParseMetric(input)
}

func (p *limitedParser) ParseMetricSelector(input string) ([]*labels.Matcher, error) {
	if err := p.limits.check(input); err != nil {
		return nil, err
	}
	return p.Parser.ParseMetricSelector(input)
}

func (p *limitedParser) ParseMetricSelectors(matchers []string) ([][]*labels.Matcher, error) {
	for _, m := range matchers {
		if err := p.limits.check(m); err != nil {
			return nil, err
		}
	}
	return p.Parser.ParseMetricSelectors(matchers)
}

func (p *limitedParser) ParseSeriesDesc(input string) (labels.Labels, []parser.SequenceValue, error) {
	if err := p.limits.check(input); err != nil {
		return labels.EmptyLabels(), nil, err
	}
	return p.Parser.ParseSeriesDesc(input)
}

// noStepSubqueryInterval is the step of a subquery written without one,
// [30m:]: Prometheus' default global evaluation interval.
func noStepSubqueryInterval(int64) int64 { return time.Minute.Milliseconds() }

// subquerySteps returns how many evaluation steps the engine will run for the
// subqueries of a parsed (and preprocessed) statement, saturating at
// math.MaxInt64.
//
// The engine evaluates a subquery once, over the whole range its parent
// evaluates, widened by the subquery's range: a child evaluator from
// start-range to end at the subquery's step (engine.go, subqueryTimeRange).
// So in a range query from s to e, x[r:d] takes (e-s+r)/d+1 steps, not
// (r/d)·(e-s)/step; a nested subquery widens its parent's range again, and
// steps add up rather than multiply. Under an @ modifier, or in a part the
// engine evaluates once (StepInvariantExpr), the parent range is one instant.
// Each step costs the engine 16 bytes of per-step statistics whatever the
// request asks (stats.NewChildWithStepTracking), plus one point per series.
func subquerySteps(stmt *parser.EvalStmt, noStep func(int64) int64) int64 {
	start, end := stmt.Start.UnixMilli(), stmt.End.UnixMilli()
	interval := stmt.Interval.Milliseconds()
	if interval == 0 {
		interval = 1 // as the engine evaluates an instant query
	}
	var total int64
	var walk func(n parser.Node, start, end, interval int64)
	walk = func(n parser.Node, start, end, interval int64) {
		switch n := n.(type) {
		case *parser.SubqueryExpr:
			step := n.Step.Milliseconds()
			if step <= 0 {
				step = noStep(n.Range.Milliseconds())
			}
			if step <= 0 {
				step = 1
			}
			s, e := subqueryRange(start, end, interval, n.OriginalOffset.Milliseconds(), n.Range.Milliseconds(), step, n.Timestamp != nil)
			if e >= s {
				total = saturatingAdd(total, (e-s)/step+1)
			}
			walk(n.Expr, s, e, step)
			return
		case *parser.StepInvariantExpr:
			end = start
		}
		for c := range parser.ChildrenIter(n) {
			walk(c, start, end, interval)
		}
	}
	walk(stmt.Expr, start, end, interval)
	return total
}

// subqueryRange is the range of the child evaluator of a subquery, as the
// engine computes it (subqueryEvaluationTimes): the subquery's step grid from
// start-offset-range to the parent's last step, less offset. With an @
// modifier the offset the engine uses is relative to the query start instead,
// which moves the grid but changes its length by one step at most.
func subqueryRange(start, end, interval, offset, rng, step int64, fixed bool) (int64, int64) {
	if fixed {
		end = start
	} else if interval > 0 {
		end = start + ((end-start)/interval)*interval
	}
	s := step * ((start - offset - rng) / step)
	if s <= start-offset-rng {
		s += step
	}
	return s, end - offset
}

func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// limitedEngine is the engine the HTTP API uses: the upstream engine behind
// the subquery-step limit and, when there is one, the memory budget.
type limitedEngine struct {
	ng               *upstream.Engine
	maxSubquerySteps int64
	budget           *memoryBudget // nil: no budget
	refused          *prometheus.CounterVec
}

var _ upstream.QueryEngine = (*limitedEngine)(nil)

func (e *limitedEngine) NewInstantQuery(ctx context.Context, q storage.Queryable, opts upstream.QueryOpts, qs string, ts time.Time) (upstream.Query, error) {
	acct := e.budget.newAccount()
	qry, err := e.ng.NewInstantQuery(ctx, acct.queryable(q), opts, qs, ts)
	if err != nil {
		return nil, err
	}
	return e.check(qry, acct)
}

func (e *limitedEngine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts upstream.QueryOpts, qs string, start, end time.Time, interval time.Duration) (upstream.Query, error) {
	acct := e.budget.newAccount()
	qry, err := e.ng.NewRangeQuery(ctx, acct.queryable(q), opts, qs, start, end, interval)
	if err != nil {
		return nil, err
	}
	return e.check(qry, acct)
}

// check refuses a query whose subqueries take too many steps, before it
// allocates anything for them.
func (e *limitedEngine) check(qry upstream.Query, acct *queryAccount) (upstream.Query, error) {
	if stmt, ok := qry.Statement().(*parser.EvalStmt); ok && e.maxSubquerySteps > 0 {
		if n := subquerySteps(stmt, noStepSubqueryInterval); n > e.maxSubquerySteps {
			qry.Close()
			countRefusal(e.refused, refusedSubquerySteps)
			return nil, fmt.Errorf("%w: the subqueries would be evaluated at %d steps, more than the limit of %d (--query.max-subquery-steps); use a larger subquery step or a shorter range", ErrTooManySubquerySteps, n, e.maxSubquerySteps)
		}
	}
	if acct == nil {
		return qry, nil
	}
	return &accountedQuery{Query: qry, acct: acct}, nil
}

// accountedQuery evaluates with its memory account in the context and gives
// the account's memory back when closed, after its answer is written.
type accountedQuery struct {
	upstream.Query
	acct *queryAccount
}

func (q *accountedQuery) Exec(ctx context.Context) *upstream.Result {
	return q.Query.Exec(withAccount(ctx, q.acct))
}

func (q *accountedQuery) Close() {
	q.Query.Close()
	q.acct.release()
}
