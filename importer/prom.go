package importer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
)

// BatchSamples is about how many samples a source puts in one batch: large
// enough that a commit's fixed costs vanish, small enough that a few
// batches in flight hold little memory.
const BatchSamples = 14 << 10

// WindowMs is the span of time a Prometheus source reads at a time: the
// length of Prometheus' own blocks, and of Shale's default partitions, so
// that the storage has few partitions open at once.
const WindowMs = int64(2 * 60 * 60 * 1000)

// PromSource reads a Prometheus data directory (its blocks, and its head
// replayed from the WAL) without changing it: it may be the directory of a
// running Prometheus. Blocks are read with the upstream format packages,
// honouring their tombstones and the time range of their meta.json.
//
// It reads window by window, newest first: all series' samples of the
// newest two hours, then those of the two hours before, and so on. The
// storage then learns the newest time at once, and so refuses up front
// what is older than its retention, and has few partitions open at a time.
type PromSource struct {
	dir         string
	logger      *slog.Logger
	read, total atomic.Int64
}

// NewPromSource returns a source reading the Prometheus data directory dir.
// It writes nothing there.
func NewPromSource(dir string, logger *slog.Logger) (*PromSource, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("prometheus data directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("prometheus data directory %s is not a directory", dir)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &PromSource{dir: dir, logger: logger}, nil
}

// Progress implements Source: samples read of those the blocks hold (the
// head's are counted as they come).
func (s *PromSource) Progress() (done, total int64, unit string) {
	done, total = s.read.Load(), s.total.Load()
	return done, max(done, total), "samples"
}

// Run implements Source.
func (s *PromSource) Run(ctx context.Context, emit func(Batch) error) (err error) {
	blocks, err := openBlocks(s.dir)
	if err != nil {
		return fmt.Errorf("open the blocks of %s: %w", s.dir, err)
	}
	defer func() {
		if cerr := closeBlocks(blocks); cerr != nil && err == nil {
			err = cerr
		}
	}()
	// Without a WAL there is no head (a folder of blocks alone, as
	// promtool tsdb create-blocks-from writes).
	_, werr := os.Stat(filepath.Join(s.dir, "wal"))
	hasWAL := werr == nil
	var (
		windows [][2]int64 // [mint, maxt], inclusive
		head    []headSeries
		// maxt ends the blocks' time; the head starts there.
		maxt = int64(math.MinInt64)
	)
	if len(blocks) == 0 {
		if !hasWAL {
			return fmt.Errorf("%s holds neither blocks nor a WAL: not a Prometheus data directory", s.dir)
		}
		windows = append(windows, [2]int64{math.MinInt64, math.MaxInt64})
	} else {
		var total int64
		mint := int64(math.MaxInt64)
		for _, b := range blocks {
			total += b.meta.Stats.NumSamples
			mint, maxt = min(mint, b.meta.MinTime), max(maxt, b.meta.MaxTime)
		}
		s.total.Store(total)
		if hasWAL {
			// The head: everything from the end of the last block on.
			windows = append(windows, [2]int64{maxt, math.MaxInt64})
		}
		for end := maxt; end > mint; {
			start := max(mint, floorDiv(end-1, WindowMs)*WindowMs)
			if overlapsAny(blocks, start, end) {
				windows = append(windows, [2]int64{start, end - 1})
			}
			end = start
		}
	}
	if hasWAL {
		if head, err = headReplay(s.dir, maxt, s.logger); err != nil {
			return fmt.Errorf("replay the head of %s: %w", s.dir, err)
		}
	}
	for _, w := range windows {
		if err := s.readWindow(ctx, blocks, head, w[0], w[1], emit); err != nil {
			if ctxErr := context.Cause(ctx); ctxErr != nil && errors.Is(err, ctx.Err()) {
				return ctxErr
			}
			return err
		}
	}
	return nil
}

// readWindow emits, in batches, every series' samples in [mint, maxt] from
// the blocks and the head, merged: a series found in several (overlapping
// blocks) is sent once, its samples in time order.
func (s *PromSource) readWindow(ctx context.Context, blocks []*promBlock, head []headSeries, mint, maxt int64, emit func(Batch) error) error {
	var cursors []seriesCursor
	for _, b := range blocks {
		if b.meta.MinTime <= maxt && mint < b.meta.MaxTime {
			c, err := newBlockCursor(ctx, b, mint, maxt)
			if err != nil {
				return err
			}
			cursors = append(cursors, c)
		}
	}
	if len(head) > 0 {
		cursors = append(cursors, &headCursor{series: head, mint: mint, maxt: maxt})
	}
	var (
		batch Batch
		n     int
		// slab holds the samples of a batch: one allocation for many
		// series.
		slab []Sample
		next []seriesCursor // the cursors at the smallest labels
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		s.read.Add(int64(n))
		err := emit(batch)
		batch, n, slab = nil, 0, nil
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var lset labels.Labels
		next = next[:0]
		for _, c := range cursors {
			l, ok, err := c.peek()
			if err != nil {
				return fmt.Errorf("read %s: %w", s.dir, err)
			}
			if !ok {
				continue
			}
			switch cmp := labels.Compare(l, lset); {
			case len(next) == 0 || cmp < 0:
				lset, next = l, append(next[:0], c)
			case cmp == 0:
				next = append(next, c)
			}
		}
		if len(next) == 0 {
			break
		}
		if slab == nil {
			slab = make([]Sample, 0, BatchSamples+BatchSamples/4)
		}
		from := len(slab)
		for _, c := range next {
			var err error
			// A series longer than the room left moves to a new
			// array; the series before keep the old one.
			if slab, err = c.read(slab); err != nil {
				return fmt.Errorf("read %s: %w", s.dir, err)
			}
		}
		samples := slab[from:len(slab):len(slab)]
		if len(next) > 1 {
			samples = timeOrdered(samples)
		}
		if len(samples) == 0 {
			continue
		}
		batch = append(batch, Series{Labels: lset, Samples: samples})
		if n += len(samples); n >= BatchSamples {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func overlapsAny(blocks []*promBlock, start, end int64) bool {
	for _, b := range blocks {
		m := b.meta
		if m.MinTime < end && start < m.MaxTime {
			return true
		}
	}
	return false
}
