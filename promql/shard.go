package promql

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/annotations"
)

// A range query's steps are independent of each other: the value at step t
// depends only on the data in a window around t (see window), and subqueries
// align their own steps to absolute time. So the steps of a long range query
// can be split into consecutive runs evaluated at once on several cores and
// joined series by series, and the answer is the one the engine gives for the
// whole range. The upstream engine evaluates a query on one goroutine; on a
// machine with idle cores, a dashboard's first evaluation (every step a cache
// miss) waits on that one core.
//
// Each part is a query of its own: it takes a slot of the concurrency gate
// and an account of the memory budget, and the engine's sample limit applies
// to each part. Only expressions the results cache would keep are split
// (cacheable): @ modifiers, step(), range() and the like depend on the
// request's range, not on the step.

// minShardSteps is the fewest steps worth a part of their own: below it the
// part's fixed costs (selecting the series, reading their blocks) outweigh
// what evaluating the steps on another core saves.
const minShardSteps = 50

// shardedRun returns a rangeRun that evaluates [start, end] with run in up to
// parts consecutive pieces at once, each of at least minShardSteps steps, and
// joins them. With parts < 2, or too few steps, it is run itself.
func shardedRun(run rangeRun, step int64, parts int) rangeRun {
	if parts < 2 || step <= 0 {
		return run
	}
	return func(ctx context.Context, start, end int64) (upstream.Matrix, annotations.Annotations, func(), error) {
		steps := (end-start)/step + 1
		k := min(int64(parts), steps/minShardSteps)
		if k < 2 {
			return run(ctx, start, end)
		}
		per := (steps + k - 1) / k
		type piece struct {
			m       upstream.Matrix
			annos   annotations.Annotations
			release func()
			err     error
		}
		pieces := make([]piece, 0, k)
		for s := start; s <= end; s += per * step {
			pieces = append(pieces, piece{})
		}
		// A failing part cancels the parts after it, never those before:
		// the engine stops a range query at its earliest failing step, so
		// the answer is the error of the earliest part that fails of itself.
		// A part cancelled this way fails with the engine's cancellation
		// error, which must not stand for the failure that caused it.
		cancels := make([]context.CancelFunc, len(pieces))
		ctxs := make([]context.Context, len(pieces))
		for i := range pieces {
			ctxs[i], cancels[i] = context.WithCancel(ctx)
		}
		defer func() {
			for _, c := range cancels {
				c()
			}
		}()
		var wg sync.WaitGroup
		for i := range pieces {
			s := start + int64(i)*per*step
			e := min(end, s+(per-1)*step)
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := &pieces[i]
				p.m, p.annos, p.release, p.err = run(ctxs[i], s, e)
				if p.err != nil {
					for _, c := range cancels[i+1:] {
						c() // their work is wasted now
					}
				}
			}()
		}
		wg.Wait()
		defer func() {
			for _, p := range pieces {
				if p.release != nil {
					p.release()
				}
			}
		}()
		annos := annotations.Annotations{}
		var err error
		for _, p := range pieces {
			annos.Merge(p.annos)
			if err == nil {
				err = p.err
			}
		}
		if err != nil {
			return nil, annos, nil, err
		}
		ms := make([]upstream.Matrix, len(pieces))
		for i, p := range pieces {
			ms[i] = p.m
		}
		return joinMatrices(ms), annos, nil, nil
	}
}

// joinMatrices joins time-ordered pieces of one range query's result (each
// piece's steps before the next's) into one, series matched by labels and
// sorted by labels, as the engine sorts a range query's result. The points
// are copied: the pieces may be released afterwards.
func joinMatrices(pieces []upstream.Matrix) upstream.Matrix {
	index := map[string]int{}
	var out upstream.Matrix
	var buf []byte
	for _, m := range pieces {
		for _, s := range m {
			buf = s.Metric.Bytes(buf)
			i, ok := index[string(buf)]
			if !ok {
				i = len(out)
				index[string(buf)] = i
				out = append(out, upstream.Series{Metric: s.Metric})
			}
			if len(s.Floats) > 0 {
				out[i].Floats = append(out[i].Floats, s.Floats...)
			}
			if len(s.Histograms) > 0 {
				out[i].Histograms = append(out[i].Histograms, s.Histograms...)
			}
		}
	}
	sortMatrix(out)
	return out
}

// sortMatrix puts m in the engine's order for a range query's result
// (Matrix.Less): by labels.
func sortMatrix(m upstream.Matrix) {
	slices.SortFunc(m, func(a, b upstream.Series) int { return labels.Compare(a.Metric, b.Metric) })
}
