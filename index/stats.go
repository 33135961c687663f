package index

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// Stat is one entry of a cardinality ranking.
type Stat struct {
	Name  string
	Count uint64
}

// Stats are the cardinality statistics of one partition, the figures of
// Prometheus' /api/v1/status/tsdb. Each ranking is sorted by Count
// descending, then Name ascending, and holds at most topN entries.
type Stats struct {
	NumSeries     uint64
	NumLabelPairs int
	// SeriesCountByMetricName ranks __name__ values by series count.
	SeriesCountByMetricName []Stat
	// LabelValueCountByLabelName ranks label names by distinct values.
	LabelValueCountByLabelName []Stat
	// MemoryInBytesByLabelName ranks label names by the bytes their pairs
	// take across all series, with Prometheus' own measure
	// (labels.SizeOfLabels) so the figures compare.
	MemoryInBytesByLabelName []Stat
	// SeriesCountByLabelValuePair ranks "name=value" pairs by series count.
	SeriesCountByLabelValuePair []Stat
}

// ComputeStats computes the cardinality statistics of r by reading every
// postings list; MemIndex.Stats does the same without copying bitmaps.
func ComputeStats(ctx context.Context, r Reader, topN int) (Stats, error) {
	all, err := r.AllPostings(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("read all postings: %w", err)
	}
	sb := newStatsBuilder(topN)
	sb.st.NumSeries = orEmpty(all).GetCardinality()
	names, err := r.LabelNames(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("read label names: %w", err)
	}
	for _, name := range names {
		values, err := r.LabelValues(ctx, name)
		if err != nil {
			return Stats{}, fmt.Errorf("read values of label %q: %w", name, err)
		}
		sb.startName()
		for i, v := range values {
			if i%checkContextEvery == 0 && ctx.Err() != nil {
				return Stats{}, ctx.Err()
			}
			bm, err := r.Postings(ctx, name, v)
			if err != nil {
				return Stats{}, fmt.Errorf("read postings of %s=%q: %w", name, v, err)
			}
			sb.pair(name, v, orEmpty(bm).GetCardinality())
		}
		sb.endName(name, len(values))
	}
	return sb.result(), nil
}

// Stats computes the cardinality statistics of the index. It holds the read
// lock throughout, so appenders that create series wait for it.
func (ix *MemIndex) Stats(topN int) Stats {
	return UnionStats([]*MemIndex{ix}, []*roaring.Bitmap{nil}, topN)
}

// UnionStats computes the cardinality statistics of the union of the series
// of ixs, which may hold the same series (the partitions of a head): only[i]
// holds the refs of the series of ixs[i] that no earlier index holds, nil
// for all of them. The figures are those of one index holding each series
// once, got without building it. It holds the read lock of every index
// throughout; series added to ixs[i] (i > 0) after only[i] was taken are
// left out.
func UnionStats(ixs []*MemIndex, only []*roaring.Bitmap, topN int) Stats {
	for _, ix := range ixs {
		ix.mu.RLock()
		defer ix.mu.RUnlock()
	}
	sb := newStatsBuilder(topN)
	for i, ix := range ixs {
		if only[i] == nil {
			sb.st.NumSeries += uint64(len(ix.offsets))
		} else {
			sb.st.NumSeries += only[i].GetCardinality()
		}
	}
	// Each name and each of its values is counted in the first index that
	// holds it, with the series of every index from there on.
	seen := make(map[string]bool)
	byIndex := make([]*namePostings, len(ixs))
	for i, ix := range ixs {
		for name := range ix.postings {
			if seen[name] {
				continue
			}
			seen[name] = true
			for j := i; j < len(ixs); j++ {
				byIndex[j] = ixs[j].postings[name]
			}
			sb.startName()
			values := 0
			for j := i; j < len(ixs); j++ {
				if byIndex[j] == nil {
					continue
				}
			value:
				for v := range byIndex[j].values {
					for _, earlier := range byIndex[i:j] {
						if earlier == nil {
							continue
						}
						if _, ok := earlier.values[v]; ok {
							continue value
						}
					}
					var n uint64
					for l := j; l < len(ixs); l++ {
						if byIndex[l] != nil {
							if p, ok := byIndex[l].values[v]; ok {
								n += p.cardIn(only[l])
							}
						}
					}
					if n > 0 {
						sb.pair(name, v, n)
						values++
					}
				}
			}
			sb.endName(name, values)
		}
	}
	return sb.result()
}

type statsBuilder struct {
	topN                     int
	st                       Stats
	metrics, valueCount, mem topHeap
	pairs                    topHeap
	size                     uint64
}

func newStatsBuilder(topN int) *statsBuilder {
	return &statsBuilder{topN: max(topN, 0)}
}

// startName starts the pairs of one label name.
func (sb *statsBuilder) startName() {
	sb.size = 0
}

func (sb *statsBuilder) pair(name, value string, series uint64) {
	if name == model.MetricNameLabel {
		sb.metrics.push(sb.topN, Stat{Name: value, Count: series})
	}
	sb.size += labels.SizeOfLabels(name, value, series)
	// Build the pair's name only if it ranks.
	if len(sb.pairs) < sb.topN || (sb.topN > 0 && series >= sb.pairs[0].Count) {
		sb.pairs.push(sb.topN, Stat{Name: name + "=" + value, Count: series})
	}
}

// endName ends the pairs of label name, which has that many values.
func (sb *statsBuilder) endName(name string, values int) {
	sb.st.NumLabelPairs += values
	sb.valueCount.push(sb.topN, Stat{Name: name, Count: uint64(values)})
	sb.mem.push(sb.topN, Stat{Name: name, Count: sb.size})
}

func (sb *statsBuilder) result() Stats {
	sb.st.SeriesCountByMetricName = sb.metrics.sorted()
	sb.st.LabelValueCountByLabelName = sb.valueCount.sorted()
	sb.st.MemoryInBytesByLabelName = sb.mem.sorted()
	sb.st.SeriesCountByLabelValuePair = sb.pairs.sorted()
	return sb.st
}

// rank orders stats best first: higher count, then smaller name.
func rank(a, b Stat) int {
	if c := cmp.Compare(b.Count, a.Count); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// topHeap keeps the best topN stats; its root is the worst kept.
type topHeap []Stat

func (h topHeap) Len() int           { return len(h) }
func (h topHeap) Less(i, j int) bool { return rank(h[i], h[j]) > 0 }
func (h topHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topHeap) Push(x any)        { *h = append(*h, x.(Stat)) }
func (h *topHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *topHeap) push(topN int, s Stat) {
	switch {
	case topN <= 0:
	case len(*h) < topN:
		heap.Push(h, s)
	case rank(s, (*h)[0]) < 0:
		(*h)[0] = s
		heap.Fix(h, 0)
	}
}

func (h topHeap) sorted() []Stat {
	out := slices.Clone(h)
	slices.SortFunc(out, rank)
	return out
}
