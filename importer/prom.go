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
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// BatchSamples is about how many samples a source puts in one batch: large
// enough that a commit's fixed costs vanish, small enough that a few
// batches in flight hold little memory.
const BatchSamples = 14 << 10

// WindowMs is the span of time a Prometheus source reads at a time: the
// length of Prometheus' own blocks, and of Shale's default partitions, so
// that the storage has few partitions open at once.
const WindowMs = int64(2 * 60 * 60 * 1000)

// PromSource reads a Prometheus data directory (its blocks and its head,
// replayed from the WAL and the memory-mapped head chunks) through the
// upstream tsdb reader, without changing it: it may be the directory of a
// running Prometheus.
//
// It reads window by window, newest first: all series' samples of the
// newest two hours, then those of the two hours before, and so on. The
// storage then learns the newest time at once, and so refuses up front
// what is older than its retention, and has few partitions open at a time.
type PromSource struct {
	dir, sandbox string
	logger       *slog.Logger
	read, total  atomic.Int64
}

// NewPromSource returns a source reading the Prometheus data directory dir.
// sandbox is a folder the reader may write its scratch files in (hard links
// to the head's chunk files: on the same file system as dir); empty picks
// dir itself when it is writable, else the system's temporary folder.
func NewPromSource(dir, sandbox string, logger *slog.Logger) (*PromSource, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("prometheus data directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("prometheus data directory %s is not a directory", dir)
	}
	if sandbox == "" {
		sandbox = dir
		if f, err := os.MkdirTemp(dir, ".shale-import-probe"); err != nil {
			sandbox = os.TempDir()
		} else {
			_ = os.Remove(f)
		}
	}
	return &PromSource{dir: dir, sandbox: sandbox, logger: logger}, nil
}

// Progress implements Source: samples read of those the blocks hold (the
// head's are counted as they come).
func (s *PromSource) Progress() (done, total int64, unit string) {
	done, total = s.read.Load(), s.total.Load()
	return done, max(done, total), "samples"
}

// Run implements Source.
func (s *PromSource) Run(ctx context.Context, emit func(Batch) error) (err error) {
	db, err := tsdb.OpenDBReadOnly(s.dir, s.sandbox, s.logger)
	if err != nil {
		return fmt.Errorf("open %s: %w", s.dir, err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", s.dir, cerr)
		}
	}()
	blocks, err := db.Blocks()
	if err != nil {
		return fmt.Errorf("open the blocks of %s: %w", s.dir, err)
	}
	// Without a WAL there is no head (a folder of blocks alone, as
	// promtool tsdb create-blocks-from writes): the reader must not look
	// for one.
	_, werr := os.Stat(filepath.Join(s.dir, "wal"))
	hasWAL := werr == nil
	var windows [][2]int64 // [mint, maxt], inclusive
	queryMax := int64(math.MaxInt64)
	if len(blocks) == 0 {
		if !hasWAL {
			return fmt.Errorf("%s holds neither blocks nor a WAL: not a Prometheus data directory", s.dir)
		}
		windows = append(windows, [2]int64{math.MinInt64, math.MaxInt64})
	} else {
		var total int64
		mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
		for _, b := range blocks {
			m := b.Meta()
			total += int64(m.Stats.NumSamples)
			mint, maxt = min(mint, m.MinTime), max(maxt, m.MaxTime)
		}
		s.total.Store(total)
		if hasWAL {
			// The head: everything from the end of the last block on.
			windows = append(windows, [2]int64{maxt, math.MaxInt64})
		} else {
			queryMax = maxt - 1
		}
		for end := maxt; end > mint; {
			start := max(mint, floorDiv(end-1, WindowMs)*WindowMs)
			if overlapsAny(blocks, start, end) {
				windows = append(windows, [2]int64{start, end - 1})
			}
			end = start
		}
	}
	// One querier for all windows: the read-only DB replays the WAL for
	// each querier it opens.
	q, err := db.Querier(math.MinInt64, queryMax)
	if err != nil {
		return fmt.Errorf("open a querier on %s: %w", s.dir, err)
	}
	defer q.Close()
	all := labels.MustNewMatcher(labels.MatchRegexp, "", ".*")
	var it chunkenc.Iterator
	for _, w := range windows {
		var (
			batch Batch
			n     int
			// slab holds the samples of a batch: one allocation for
			// many series.
			slab []Sample
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
		set := q.Select(ctx, false, &promstorage.SelectHints{Start: w[0], End: w[1]}, all)
		for set.Next() {
			ser := set.At()
			it = ser.Iterator(it)
			if slab == nil {
				slab = make([]Sample, 0, BatchSamples+BatchSamples/4)
			}
			from := len(slab)
			for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
				var smp Sample
				switch vt {
				case chunkenc.ValFloat:
					smp.T, smp.V = it.At()
				case chunkenc.ValHistogram:
					smp.T, smp.H = it.AtHistogram(nil)
				case chunkenc.ValFloatHistogram:
					smp.T, smp.FH = it.AtFloatHistogram(nil)
				default:
					return fmt.Errorf("series %s: unknown sample kind %v", ser.Labels(), vt)
				}
				// A series longer than the room left moves to a new
				// array; the series before keep the old one.
				slab = append(slab, smp)
			}
			samples := slab[from:len(slab):len(slab)]
			if err := it.Err(); err != nil {
				return fmt.Errorf("read series %s: %w", ser.Labels(), err)
			}
			if len(samples) == 0 {
				continue
			}
			batch = append(batch, Series{Labels: ser.Labels(), Samples: samples})
			if n += len(samples); n >= BatchSamples {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := set.Err(); err != nil {
			if ctxErr := context.Cause(ctx); ctxErr != nil && errors.Is(err, ctx.Err()) {
				return ctxErr
			}
			return fmt.Errorf("read %s: %w", s.dir, err)
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func overlapsAny(blocks []tsdb.BlockReader, start, end int64) bool {
	for _, b := range blocks {
		m := b.Meta()
		if m.MinTime < end && start < m.MaxTime {
			return true
		}
	}
	return false
}
