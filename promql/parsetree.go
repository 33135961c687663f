package promql

import (
	"fmt"
	"strconv"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// The answer of /api/v1/parse_query: the parsed expression as a tree of JSON
// objects, one per node, each saying what it is in "type". Prometheus' query
// page draws its tree view from this shape, so the names, the nulls and the
// order of the keys (alphabetical: Prometheus writes maps) are kept exactly;
// each struct below lists its fields in that order.

// syntaxTree converts a parsed expression into the JSON tree. It fails only
// on a node kind the parser has grown since this code was written.
func syntaxTree(e parser.Expr) (any, error) {
	switch n := e.(type) {
	case nil:
		return nil, nil
	case *parser.AggregateExpr:
		return aggregationNode(n)
	case *parser.BinaryExpr:
		return binaryNode(n)
	case *parser.Call:
		return callNode(n)
	case *parser.MatrixSelector:
		return matrixNode(n)
	case *parser.SubqueryExpr:
		return subqueryNode(n)
	case *parser.DurationExpr:
		return durationTree(n)
	case *parser.NumberLiteral:
		return literal{Type: "numberLiteral", Val: formatNumber(n.Val)}, nil
	case *parser.StringLiteral:
		return literal{Type: "stringLiteral", Val: n.Val}, nil
	case *parser.ParenExpr:
		inner, err := syntaxTree(n.Expr)
		return parenNode{Expr: inner, Type: "parenExpr"}, err
	case *parser.UnaryExpr:
		inner, err := syntaxTree(n.Expr)
		return unaryNode{Expr: inner, Op: n.Op.String(), Type: "unaryExpr"}, err
	case *parser.VectorSelector:
		return vectorNode(n)
	}
	return nil, fmt.Errorf("parse tree: unknown PromQL node %T", e)
}

type aggregation struct {
	Expr     any      `json:"expr"`
	Grouping []string `json:"grouping"`
	Op       string   `json:"op"`
	Param    any      `json:"param"`
	Type     string   `json:"type"`
	Without  bool     `json:"without"`
}

func aggregationNode(n *parser.AggregateExpr) (any, error) {
	inner, err := syntaxTree(n.Expr)
	if err != nil {
		return nil, err
	}
	param, err := syntaxTree(n.Param)
	if err != nil {
		return nil, err
	}
	return aggregation{
		Expr:     inner,
		Grouping: nonNil(n.Grouping),
		Op:       n.Op.String(),
		Param:    param,
		Type:     "aggregation",
		Without:  n.Without,
	}, nil
}

type binaryOp struct {
	Bool     bool      `json:"bool"`
	LHS      any       `json:"lhs"`
	Matching *matching `json:"matching"`
	Op       string    `json:"op"`
	RHS      any       `json:"rhs"`
	Type     string    `json:"type"`
}

// matching is the on/ignoring, group_left/group_right and fill modifiers of
// an operation between two vectors; absent (null) between scalars.
type matching struct {
	Card       string     `json:"card"`
	FillValues fillValues `json:"fillValues"`
	Include    []string   `json:"include"`
	Labels     []string   `json:"labels"`
	On         bool       `json:"on"`
}

type fillValues struct {
	LHS *float64 `json:"lhs"`
	RHS *float64 `json:"rhs"`
}

func binaryNode(n *parser.BinaryExpr) (any, error) {
	lhs, err := syntaxTree(n.LHS)
	if err != nil {
		return nil, err
	}
	rhs, err := syntaxTree(n.RHS)
	if err != nil {
		return nil, err
	}
	b := binaryOp{Bool: n.ReturnBool, LHS: lhs, Op: n.Op.String(), RHS: rhs, Type: "binaryExpr"}
	if vm := n.VectorMatching; vm != nil {
		b.Matching = &matching{
			Card:       vm.Card.String(),
			FillValues: fillValues{LHS: vm.FillValues.LHS, RHS: vm.FillValues.RHS},
			Include:    nonNil(vm.Include),
			Labels:     nonNil(vm.MatchingLabels),
			On:         vm.On,
		}
	}
	return b, nil
}

type call struct {
	Args []any        `json:"args"`
	Func functionInfo `json:"func"`
	Type string       `json:"type"`
}

type functionInfo struct {
	ArgTypes   []parser.ValueType `json:"argTypes"`
	Name       string             `json:"name"`
	ReturnType parser.ValueType   `json:"returnType"`
	Variadic   int                `json:"variadic"`
}

func callNode(n *parser.Call) (any, error) {
	args := make([]any, len(n.Args))
	for i, a := range n.Args {
		var err error
		if args[i], err = syntaxTree(a); err != nil {
			return nil, err
		}
	}
	f := n.Func
	return call{
		Args: args,
		Func: functionInfo{ArgTypes: f.ArgTypes, Name: f.Name, ReturnType: f.ReturnType, Variadic: f.Variadic},
		Type: "call",
	}, nil
}

// matcher is one label matcher of a selector; Type is =, !=, =~ or !~.
type matcher struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

func matchersOf(ms []*labels.Matcher) []matcher {
	out := make([]matcher, len(ms))
	for i, m := range ms {
		out[i] = matcher{Name: m.Name, Type: m.Type.String(), Value: m.Value}
	}
	return out
}

type vectorSelector struct {
	Anchored   bool      `json:"anchored"`
	Matchers   []matcher `json:"matchers"`
	Name       string    `json:"name"`
	Offset     int64     `json:"offset"`
	OffsetExpr any       `json:"offsetExpr"`
	Smoothed   bool      `json:"smoothed"`
	StartOrEnd *string   `json:"startOrEnd"`
	Timestamp  *int64    `json:"timestamp"`
	Type       string    `json:"type"`
}

func vectorNode(n *parser.VectorSelector) (any, error) {
	offset, err := durationTree(n.OriginalOffsetExpr)
	if err != nil {
		return nil, err
	}
	return vectorSelector{
		Anchored:   n.Anchored,
		Matchers:   matchersOf(n.LabelMatchers),
		Name:       n.Name,
		Offset:     n.OriginalOffset.Milliseconds(),
		OffsetExpr: offset,
		Smoothed:   n.Smoothed,
		StartOrEnd: atModifier(n.StartOrEnd),
		Timestamp:  n.Timestamp,
		Type:       "vectorSelector",
	}, nil
}

// matrixSelector is a range selector, which the tree shows as one node: the
// vector selector's fields with the range's.
type matrixSelector struct {
	Anchored   bool      `json:"anchored"`
	Matchers   []matcher `json:"matchers"`
	Name       string    `json:"name"`
	Offset     int64     `json:"offset"`
	OffsetExpr any       `json:"offsetExpr"`
	Range      int64     `json:"range"`
	RangeExpr  any       `json:"rangeExpr"`
	Smoothed   bool      `json:"smoothed"`
	StartOrEnd *string   `json:"startOrEnd"`
	Timestamp  *int64    `json:"timestamp"`
	Type       string    `json:"type"`
}

func matrixNode(n *parser.MatrixSelector) (any, error) {
	vs, ok := n.VectorSelector.(*parser.VectorSelector)
	if !ok {
		return nil, fmt.Errorf("parse tree: range over %T, not a vector selector", n.VectorSelector)
	}
	offset, err := durationTree(vs.OriginalOffsetExpr)
	if err != nil {
		return nil, err
	}
	rng, err := durationTree(n.RangeExpr)
	if err != nil {
		return nil, err
	}
	return matrixSelector{
		Anchored:   vs.Anchored,
		Matchers:   matchersOf(vs.LabelMatchers),
		Name:       vs.Name,
		Offset:     vs.OriginalOffset.Milliseconds(),
		OffsetExpr: offset,
		Range:      n.Range.Milliseconds(),
		RangeExpr:  rng,
		Smoothed:   vs.Smoothed,
		StartOrEnd: atModifier(vs.StartOrEnd),
		Timestamp:  vs.Timestamp,
		Type:       "matrixSelector",
	}, nil
}

type subquery struct {
	Expr       any     `json:"expr"`
	Offset     int64   `json:"offset"`
	OffsetExpr any     `json:"offsetExpr"`
	Range      int64   `json:"range"`
	RangeExpr  any     `json:"rangeExpr"`
	StartOrEnd *string `json:"startOrEnd"`
	Step       int64   `json:"step"`
	StepExpr   any     `json:"stepExpr"`
	Timestamp  *int64  `json:"timestamp"`
	Type       string  `json:"type"`
}

func subqueryNode(n *parser.SubqueryExpr) (any, error) {
	s := subquery{
		Offset:     n.OriginalOffset.Milliseconds(),
		Range:      n.Range.Milliseconds(),
		StartOrEnd: atModifier(n.StartOrEnd),
		Step:       n.Step.Milliseconds(),
		Timestamp:  n.Timestamp,
		Type:       "subquery",
	}
	var err error
	if s.Expr, err = syntaxTree(n.Expr); err != nil {
		return nil, err
	}
	if s.OffsetExpr, err = durationTree(n.OriginalOffsetExpr); err != nil {
		return nil, err
	}
	if s.RangeExpr, err = durationTree(n.RangeExpr); err != nil {
		return nil, err
	}
	if s.StepExpr, err = durationTree(n.StepExpr); err != nil {
		return nil, err
	}
	return s, nil
}

// durationExpr is arithmetic on durations, as in x[5m+1m] or offset -(1h).
type durationExpr struct {
	LHS     any    `json:"lhs"`
	Op      string `json:"op"`
	RHS     any    `json:"rhs"`
	Type    string `json:"type"`
	Wrapped bool   `json:"wrapped"`
}

// durationNumber is a number inside a duration expression, which also says
// whether it was written as a duration (5m) or a plain number of seconds.
type durationNumber struct {
	Duration bool   `json:"duration"`
	Type     string `json:"type"`
	Val      string `json:"val"`
}

// durationTree converts a duration expression (a range, step or offset) and
// its operands; a nil expression, typed or not, is null.
func durationTree(e parser.Expr) (any, error) {
	switch n := e.(type) {
	case *parser.DurationExpr:
		if n == nil {
			return nil, nil
		}
		lhs, err := durationTree(n.LHS)
		if err != nil {
			return nil, err
		}
		rhs, err := durationTree(n.RHS)
		if err != nil {
			return nil, err
		}
		return durationExpr{LHS: lhs, Op: n.Op.String(), RHS: rhs, Type: "durationExpr", Wrapped: n.Wrapped}, nil
	case *parser.NumberLiteral:
		if n == nil {
			return nil, nil
		}
		return durationNumber{Duration: n.Duration, Type: "numberLiteral", Val: formatNumber(n.Val)}, nil
	}
	return syntaxTree(e)
}

// literal is a number or a string written in the query.
type literal struct {
	Type string `json:"type"`
	Val  string `json:"val"`
}

type parenNode struct {
	Expr any    `json:"expr"`
	Type string `json:"type"`
}

type unaryNode struct {
	Expr any    `json:"expr"`
	Op   string `json:"op"`
	Type string `json:"type"`
}

// formatNumber writes a literal with as many digits as it needs and no
// exponent, as the query page shows it.
func formatNumber(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// atModifier names the @ start() or @ end() of a selector or subquery; null
// where there is none or the @ has a timestamp.
func atModifier(t parser.ItemType) *string {
	if t == 0 {
		return nil
	}
	s := t.String()
	return &s
}

// nonNil makes a missing label list an empty one: the tree shows [] rather
// than null.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
