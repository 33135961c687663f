package storage

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/index"
)

// exemplarStore keeps the newest exemplars in memory, in a ring of fixed
// size shared by all series, as Prometheus does. The ring grows to its size
// as exemplars arrive: allocated whole (5 MiB at the default 100k) it cost
// a server that receives none that much heap, scanned at every collection.
type exemplarStore struct {
	mu   sync.RWMutex
	size int
	ring []storedExemplar // at most size; len(ring) == next until full
	next int
	full bool
}

type storedExemplar struct {
	lset labels.Labels
	e    exemplar.Exemplar
}

func newExemplarStore(size int) *exemplarStore {
	return &exemplarStore{size: max(size, 0)}
}

func (s *exemplarStore) add(lset labels.Labels, e exemplar.Exemplar) {
	if s.size == 0 {
		return
	}
	s.mu.Lock()
	se := storedExemplar{lset: lset, e: e}
	if len(s.ring) < s.size {
		if len(s.ring) == cap(s.ring) {
			s.ring = slices.Grow(s.ring, min(s.size, max(64, 2*len(s.ring)))-len(s.ring))
		}
		s.ring = append(s.ring, se)
	} else {
		s.ring[s.next] = se
	}
	s.next++
	if s.next == s.size {
		s.next, s.full = 0, true
	}
	s.mu.Unlock()
}

// ExemplarQuerier returns a querier of the exemplars kept in memory.
func (db *DB) ExemplarQuerier(_ context.Context) (promstorage.ExemplarQuerier, error) {
	return exemplarQuerier{db.ex}, nil
}

type exemplarQuerier struct{ s *exemplarStore }

// Select returns the exemplars in [start, end] of series matching any of the
// matcher sets, grouped by series.
func (q exemplarQuerier) Select(start, end int64, matchers ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	q.s.mu.RLock()
	defer q.s.mu.RUnlock()
	bySeries := map[string]*exemplar.QueryResult{}
	n := q.s.next
	if q.s.full {
		n = len(q.s.ring)
	}
	for i := 0; i < n; i++ {
		se := q.s.ring[i]
		if se.e.Ts < start || se.e.Ts > end || !matchesAny(se.lset, matchers) {
			continue
		}
		key := se.lset.String()
		r := bySeries[key]
		if r == nil {
			r = &exemplar.QueryResult{SeriesLabels: se.lset}
			bySeries[key] = r
		}
		r.Exemplars = append(r.Exemplars, se.e)
	}
	out := make([]exemplar.QueryResult, 0, len(bySeries))
	for _, r := range bySeries {
		slices.SortFunc(r.Exemplars, func(a, b exemplar.Exemplar) int { return cmp.Compare(a.Ts, b.Ts) })
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b exemplar.QueryResult) int { return labels.Compare(a.SeriesLabels, b.SeriesLabels) })
	return out, nil
}

func matchesAny(lset labels.Labels, sets [][]*labels.Matcher) bool {
	for _, ms := range sets {
		ok := true
		for _, m := range ms {
			if !m.Matches(lset.Get(m.Name)) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// HeadBlocks returns the number of sample blocks the head's open partitions
// hold in memory (see memSeries.blocksLocked), what Prometheus reports as its
// head's chunk count. It takes each series' lock in turn.
func (db *DB) HeadBlocks() int64 {
	db.head.mu.RLock()
	parts := db.head.sortedPartsLocked()
	db.head.mu.RUnlock()
	var (
		n   int64
		buf = make([]*memSeries, 4096)
	)
	for _, p := range parts {
		for lo := 0; ; {
			some := p.seriesFrom(lo, buf)
			if len(some) == 0 {
				break
			}
			lo += len(some)
			for _, s := range some {
				if s == nil {
					continue // retired: it holds nothing
				}
				s.lock()
				n += int64(s.blocksLocked())
				s.unlock()
			}
		}
	}
	return n
}

// HeadStats returns the cardinality statistics of the series in the head's
// open partitions (what Prometheus reports from its head block; a series in
// two partitions counts once) and the time range of the samples the head
// received: from the oldest sample committed to an open partition (its start,
// for samples from before a restart) to the newest. ok is false when the head
// is empty.
func (db *DB) HeadStats(topN int) (st index.Stats, mint, maxt int64, ok bool) {
	db.head.mu.RLock()
	parts := db.head.sortedPartsLocked()
	db.head.mu.RUnlock()
	if len(parts) == 0 {
		return index.Stats{}, 0, 0, false
	}
	mint = math.MaxInt64
	for _, p := range parts {
		m := p.minT.Load()
		if m == math.MaxInt64 {
			m = p.start // samples from before a restart: only the partition is known
		}
		mint = min(mint, m)
	}
	// Near a partition boundary most series are in two partitions: count
	// each once, from the refs of each partition's series that no earlier
	// one holds, without building an index of the union (which at millions
	// of series would take as much memory as the head's own indexes).
	ixs := make([]*index.MemIndex, len(parts))
	only := make([]*roaring.Bitmap, len(parts))
	var b labels.ScratchBuilder
	for i, p := range parts {
		ixs[i] = p.idx
		if i == 0 {
			continue
		}
		only[i] = roaring.New()
		for ref := range uint32(p.numSeries()) {
			lset := p.labelsOf(ref, &b)
			h := lset.Hash()
			earlier := false
			for _, e := range parts[:i] {
				if e.has(h, lset) {
					earlier = true
					break
				}
			}
			if !earlier {
				only[i].Add(ref)
			}
		}
	}
	return index.UnionStats(ixs, only, topN), mint, db.head.maxT.Load(), true
}
