package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/storage/objstore"
)

// TestQueriesDuringFlush runs queries while flushes of many small batches cut
// series and let their samples go: every query must see every sample
// committed before it started, once, whichever side of a batch a series is.
func TestQueriesDuringFlush(t *testing.T) {
	defer func(n int) { maxBatchBytes = n }(maxBatchBytes)
	maxBatchBytes = 256 // a batch every few series

	const series, rounds = 200, 30
	db := openTestDB(t, objstore.NewMemoryBucket(), DefaultOptions())
	defer db.Close() // before maxBatchBytes is restored
	lsets := numberedSeries(series)
	var committed atomic.Int64 // rounds every series has
	done := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		defer close(done)
		for r := int64(1); r <= rounds; r++ {
			app := db.Appender(context.Background())
			for _, ls := range lsets {
				if _, err := app.Append(0, ls, r*15000, float64(r)); err != nil {
					errs <- err
					return
				}
			}
			if err := app.Commit(); err != nil {
				errs <- err
				return
			}
			committed.Store(r)
		}
	}()
	go func() { // flusher
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := db.Flush(context.Background()); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() { // querier
		defer wg.Done()
		m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
		for {
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			before := committed.Load()
			got, err := tryQueryFloats(db, math.MinInt64, math.MaxInt64, m)
			if err != nil {
				errs <- err
				return
			}
			for _, ls := range lsets {
				smps := got[ls.String()]
				if int64(len(smps)) < before {
					errs <- fmt.Errorf("%s: %d samples, %d rounds committed before the query", ls, len(smps), before)
					return
				}
				for j, s := range smps {
					if r := int64(j + 1); s.t != r*15000 || s.v != float64(r) {
						errs <- fmt.Errorf("%s: sample %d is (%d, %g), want (%d, %d)", ls, j, s.t, s.v, r*15000, r)
						return
					}
				}
			}
			if finished {
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := testutil.ToFloat64(db.metrics.flushes); n < 2 {
		t.Fatalf("%g flushes ran beside the writes, want several", n)
	}
}

// TestFlushStopsWhenItsContextEnds checks that a head flush whose context
// has ended stops before cutting more series: the LSM takes writes whatever
// their context says, so a flush over millions of series went on for over a
// minute after a shutdown cancelled it, holding the lock the shutdown's own
// flush waited for. The series it leaves are written by the next flush.
func TestFlushStopsWhenItsContextEnds(t *testing.T) {
	defer func(n int) { maxBatchBytes = n }(maxBatchBytes)
	maxBatchBytes = 256 // a batch every few series, as at scale

	const series = 10_000 // three chunks of the cut's walk
	db := openTestDB(t, objstore.NewMemoryBucket(), DefaultOptions())
	defer db.Close() // before maxBatchBytes is restored
	app := db.Appender(context.Background())
	for _, ls := range numberedSeries(series) {
		if _, err := app.Append(0, ls, 15_000, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	keys := func(sub byte) int {
		pre := partSub(db.partitionOf(15_000), sub, 0)
		n := 0
		if err := db.scan(context.Background(), pre, prefixEnd(pre), func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("flush with its context cancelled: %v, want context.Canceled", err)
	}
	if n := keys(subSamples); n != 0 {
		t.Fatalf("a flush cancelled before it started wrote the sample blocks of %d series", n)
	}
	// Closing a partition writes its postings, batch by batch, as long.
	p := db.head.partsOverlapping(15_000, 15_000)[0]
	if err := db.writePartitionIndex(ctx, p, 15_000); !errors.Is(err, context.Canceled) {
		t.Fatalf("partition index with its context cancelled: %v, want context.Canceled", err)
	}
	if n := keys(subPostings); n != 0 {
		t.Fatalf("a partition index cancelled before it started wrote %d postings lists", n)
	}

	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := keys(subSamples); n != series {
		t.Fatalf("the next flush wrote %d series' sample blocks, want %d", n, series)
	}
	q, err := db.Querier(0, 60_000)
	if err != nil {
		t.Fatal(err)
	}
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	got := 0
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			got++
		}
	}
	if set.Err() != nil || got != series {
		t.Fatalf("read back %d samples (err %v), want %d", got, set.Err(), series)
	}
}

// numberedSeries returns n label sets m{i="0"} to m{i="n-1"}.
func numberedSeries(n int) []labels.Labels {
	lsets := make([]labels.Labels, n)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
	}
	return lsets
}

// TestCutKeepsClonesIntact checks that a series' appender, emptied by a cut
// and appended to again, leaves alone what a query cloned before the cut, and
// that a cut lets go of the appender's memory.
func TestCutKeepsClonesIntact(t *testing.T) {
	s := newMemSeries(0, newHeadPart(0, 1000))
	appendN := func(from, to int64) {
		for ts := from; ts <= to; ts++ {
			if err := s.appendLocked(sample{t: ts * 1000, v: float64(ts) * 1.5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(1, 300) // past a seal of the stream
	srcs, err := s.querySourcesLocked(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.cutLocked()
	if got, want := s.app.Size(), (&gorilla.Appender{}).Size(); got != want {
		t.Fatalf("the cut left the appender %d bytes, want %d", got, want)
	}
	if s.maxT() != 300000 {
		t.Fatalf("maxT %d after the cut, want 300000", s.maxT())
	}
	appendN(301, 700)
	var got []int64
	for _, src := range srcs {
		if src.App == nil {
			t.Fatalf("source %+v: want the clone of the open appender", src)
		}
		it := src.App.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			if v != float64(ts/1000)*1.5 {
				t.Fatalf("sample at %d = %g", ts, v)
			}
			got = append(got, ts)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 300 || got[0] != 1000 || got[299] != 300000 {
		t.Fatalf("clone read %d samples (%v...), want 1..300 s", len(got), got[:min(3, len(got))])
	}
	s.flushing = nil   // as once the first cut's batch is applied
	c := s.cutLocked() // takes 301..700
	blk, err := c.block()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := gorilla.ReadMeta(blk); err != nil || m.Count != 400 || m.MinTime != 301000 || m.MaxTime != 700000 {
		t.Fatalf("second cut: %+v, %v; want 400 samples 301..700 s", m, err)
	}
}

// TestFlushPastPartitionEnd checks that after a flush past a partition's
// end the partition's samples stay readable and a late sample still lands.
func TestFlushPastPartitionEnd(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	part := DefaultOptions().PartitionDuration.Milliseconds()
	lset := labels.FromStrings("__name__", "up", "job", "a")
	appendFloats(t, db, lset, tsample{part - 30000, 1})
	appendFloats(t, db, labels.FromStrings("__name__", "up", "job", "b"), tsample{part + 15000, 2})
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	parts := db.head.partsOverlapping(0, 2*part)
	if len(parts) != 2 {
		t.Fatalf("%d open partitions, want 2", len(parts))
	}
	appendFloats(t, db, lset, tsample{part - 15000, 3}) // late, still in order
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
	want := map[string][]tsample{
		lset.String(): {{part - 30000, 1}, {part - 15000, 3}},
		labels.FromStrings("__name__", "up", "job", "b").String(): {{part + 15000, 2}},
	}
	compareResults(t, t.Name(), got, want)
}

// TestFlushCutsInParallel writes more series than a chunk of the flush, which
// several goroutines cut and encode, in batches small enough to be applied
// in the middle of a chunk: after each flush every sample is read back once
// and in order, from the tables, and the series' cuts are let go.
func TestFlushCutsInParallel(t *testing.T) {
	defer func(n int) { maxBatchBytes = n }(maxBatchBytes)
	maxBatchBytes = 64 << 10
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	if cutWorkers() < 2 {
		t.Fatalf("cutWorkers() = %d with GOMAXPROCS 4, want several", cutWorkers())
	}

	const series, rounds = 5000, 3
	db := openTestDB(t, objstore.NewMemoryBucket(), DefaultOptions())
	defer db.Close() // before maxBatchBytes is restored
	lsets := numberedSeries(series)
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
	const perRound = 4
	for r := range rounds {
		app := db.Appender(context.Background())
		for k := range perRound {
			ts := int64(r*perRound+k+1) * 15000
			for i, ls := range lsets {
				if _, err := app.Append(0, ls, ts, float64(i)+float64(ts)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := queryFloats(t, db, math.MinInt64, math.MaxInt64, m)
		if len(got) != series {
			t.Fatalf("round %d: %d series read back, want %d", r, len(got), series)
		}
		for i, ls := range lsets {
			smps := got[ls.String()]
			if want := (r + 1) * perRound; len(smps) != want {
				t.Fatalf("round %d: %s has %d samples, want %d", r, ls, len(smps), want)
			}
			for j, s := range smps {
				if ts := int64(j+1) * 15000; s.t != ts || s.v != float64(i)+float64(ts) {
					t.Fatalf("round %d: %s sample %d is (%d, %g), want (%d, %g)", r, ls, j, s.t, s.v, ts, float64(i)+float64(ts))
				}
			}
		}
		db.head.mu.RLock()
		parts := db.head.sortedPartsLocked()
		db.head.mu.RUnlock()
		for _, p := range parts {
			for _, s := range p.seriesFrom(0, make([]*memSeries, series+1)) {
				if s == nil {
					continue
				}
				s.lock()
				dirty, flushing := s.dirtyLocked(), s.flushing != nil
				s.unlock()
				if dirty || flushing {
					t.Fatalf("round %d: series %s not let go after the flush (dirty %v, flushing %v)", r, s.lset(), dirty, flushing)
				}
			}
		}
	}
	if n := testutil.ToFloat64(db.metrics.flushedSeries); n != series*rounds {
		t.Fatalf("flushes cut %g series, want %d", n, series*rounds)
	}
}

// tableGateBucket holds every put of a table while armed, until released
// or its context ends; entered is closed when one is held.
type tableGateBucket struct {
	objstore.Bucket
	armed    atomic.Bool
	entered  chan struct{}
	enter    sync.Once
	released chan struct{}
}

func (g *tableGateBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	if g.armed.Load() && strings.HasSuffix(name, ".sst") {
		g.enter.Do(func() { close(g.entered) })
		select {
		case <-g.released:
		case <-ctx.Done():
			return objstore.Attributes{}, ctx.Err()
		}
	}
	return g.Bucket.Put(ctx, name, r, size, opts)
}

// TestRunQuietWhenStoppedDuringFlush stops Run while its flush waits for the
// object store: the flush is cut short, Close writes the head out, and
// nothing is logged as an error (it was: "head flush failed" at every
// shutdown during ingest).
func TestRunQuietWhenStoppedDuringFlush(t *testing.T) {
	g := &tableGateBucket{Bucket: objstore.NewMemoryBucket(), entered: make(chan struct{}), released: make(chan struct{})}
	var logs bytes.Buffer
	opts := DefaultOptions()
	opts.WAL = false
	db, err := openOn(context.Background(), g, "tsdb", opts, testLSMOptions(), nil,
		Components{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	app := db.Appender(context.Background())
	for _, ls := range numberedSeries(100) {
		if _, err := app.Append(0, ls, 15000, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	g.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- db.Run(ctx) }()
	db.flushNow <- struct{}{}
	<-g.entered // the flush waits for its table
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if logs.Len() > 0 {
		t.Fatalf("Run logged when stopped during a flush:\n%s", logs.String())
	}
	g.armed.Store(false)
	close(g.released)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if logs.Len() > 0 {
		t.Fatalf("Close logged:\n%s", logs.String())
	}
}
