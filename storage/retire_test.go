package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/objstore"
)

// retiredCount returns how many series of the partition at start are
// retired, and how many it has.
func retiredCount(t *testing.T, db *DB, start int64) (retired, all int) {
	t.Helper()
	p := db.head.openPart(start)
	if p == nil {
		t.Fatalf("partition %d is not open", start)
	}
	for _, s := range p.allSeries() {
		if s == nil {
			retired++
		}
	}
	p.mu.RLock()
	counted := p.nRetired
	p.mu.RUnlock()
	if counted != retired {
		t.Fatalf("partition %d counts %d retired series, holds %d", start, counted, retired)
	}
	return retired, p.numSeries()
}

// TestRetiredSeries: once the head is past a partition's end (by the
// retire delay) and a flush has written its series out, the series retire,
// and they behave as live ones would: their samples are read from the LSM,
// a resent last sample is a duplicate, a conflicting or older one is
// refused as before, a late in-order sample brings the series back, and a
// restart finds every sample and each series' newest time.
func TestRetiredSeries(t *testing.T) {
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	opts.OutOfOrderWindow = 0 // in order only: duplicates and old samples are refused
	db := openTestDB(t, b, opts)
	defer func() { _ = db.Close() }()
	part := opts.PartitionDuration.Milliseconds()
	const n = 50
	lset := func(i int) labels.Labels { return labels.FromStrings("__name__", "x", "i", strconv.Itoa(i)) }
	want := map[string][]tsample{}
	write := func(i int, s tsample) {
		t.Helper()
		appendFloats(t, db, lset(i), s)
		want[lset(i).String()] = append(want[lset(i).String()], s)
	}
	for i := range n {
		write(i, tsample{part - 120_000, float64(i)})
		write(i, tsample{part - 60_000, float64(i) + 0.5})
		if i > 3 {
			// Series 1-3 have their newest sample in the first partition,
			// where the appends below test them.
			write(i, tsample{part, 1})
		}
	}
	// The head moves past the first partition's end by the retire delay.
	write(0, tsample{part + db.retireDelay(), 2})
	ctx := context.Background()
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	if r, all := retiredCount(t, db, 0); r != n || all != n {
		t.Fatalf("%d of %d series of the ended partition retired, want all %d", r, all, n)
	}
	if r, _ := retiredCount(t, db, part); r != 0 {
		t.Fatalf("%d series of the open partition retired", r)
	}
	if got := testutil.ToFloat64(db.metrics.seriesRetired); got != n {
		t.Fatalf("shale_storage_head_series_retired_total = %v, want %d", got, n)
	}
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	check := func(db *DB, when string) {
		t.Helper()
		got := queryFloats(t, db, 0, 2*part, x)
		if len(got) != n {
			t.Fatalf("%s: %d series, want %d", when, len(got), n)
		}
		for k, w := range want {
			w = slices.SortedFunc(slices.Values(w), func(a, b tsample) int { return cmp.Compare(a.t, b.t) })
			if fmt.Sprint(got[k]) != fmt.Sprint(w) {
				t.Fatalf("%s: series %s: %v, want %v", when, k, got[k], w)
			}
		}
	}
	check(db, "retired")

	// A resent last sample is a duplicate, accepted and not stored twice.
	appendFloats(t, db, lset(1), tsample{part - 60_000, 1.5})
	// A different value at the same time, and an older sample, are refused.
	app := db.Appender(ctx)
	if _, err := app.Append(0, lset(2), part-60_000, 7); !errors.Is(err, promstorage.ErrDuplicateSampleForTimestamp) {
		t.Fatalf("conflicting value for a retired series: %v, want a duplicate-sample error", err)
	}
	if _, err := app.Append(0, lset(2), part-90_000, 7); !errors.Is(err, promstorage.ErrOutOfOrderSample) {
		t.Fatalf("older sample for a retired series: %v, want an out-of-order error", err)
	}
	_ = app.Rollback()
	// A late in-order sample brings the series back.
	write(3, tsample{part - 30_000, 3.25})
	// Series 1, 2 and 3 came back, each at its first append.
	if r, _ := retiredCount(t, db, 0); r != n-3 {
		t.Fatalf("%d series retired after late samples, want %d", r, n-3)
	}
	check(db, "after late samples")
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	if r, _ := retiredCount(t, db, 0); r != n {
		t.Fatalf("%d series retired after the next flush, want %d", r, n)
	}
	check(db, "retired again")

	db = reopen(t, db, b, opts)
	check(db, "after a restart")
	// The series times written while retired are each series' newest.
	p, err := db.loadPart(ctx, 0, partitionMeta{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		newest := part - 60_000
		if i == 3 {
			newest = part - 30_000
		}
		if got := p.storedNewest(uint32(i), -1); got != newest {
			t.Fatalf("series %d: newest time %d after a restart, want %d", i, got, newest)
		}
	}
}

// TestRetiredWhileAppending: an appender that found a series before it
// retired commits its sample all the same, to the series brought back.
func TestRetiredWhileAppending(t *testing.T) {
	opts := DefaultOptions()
	db, _ := openMemDB(t, opts)
	part := opts.PartitionDuration.Milliseconds()
	a, other := labels.FromStrings("__name__", "x", "s", "a"), labels.FromStrings("__name__", "x", "s", "b")
	appendFloats(t, db, a, tsample{part - 60_000, 1})
	appendFloats(t, db, other, tsample{part + db.retireDelay(), 1})

	ctx := context.Background()
	app := db.Appender(ctx)
	if _, err := app.Append(0, a, part-30_000, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	if r, _ := retiredCount(t, db, 0); r != 1 {
		t.Fatalf("%d series retired, want the one of the ended partition", r)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	got := queryFloats(t, db, 0, part, labels.MustNewMatcher(labels.MatchEqual, "s", "a"))
	if w := []tsample{{part - 60_000, 1}, {part - 30_000, 2}}; fmt.Sprint(got[a.String()]) != fmt.Sprint(w) {
		t.Fatalf("series a: %v, want %v", got[a.String()], w)
	}
	if r, _ := retiredCount(t, db, 0); r != 0 {
		t.Fatalf("the committed series is still retired")
	}
}

// TestRetireConcurrently runs late writers, flushes that retire their
// series and queries at once (under the race detector in CI), then checks
// that every acknowledged sample is there, before and after a restart. Half
// the writers pause halfway until a flush has retired series (theirs, idle
// meanwhile, if no other), then write to them again, so that retiring and
// reviving happen while the others write, however the goroutines are
// scheduled.
func TestRetireConcurrently(t *testing.T) {
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	db := openTestDB(t, b, opts)
	part := opts.PartitionDuration.Milliseconds()
	appendFloats(t, db, labels.FromStrings("__name__", "y"), tsample{part + db.retireDelay(), 1})
	const writers, series, rounds = 4, 40, 30
	lset := func(w, i int) labels.Labels {
		return labels.FromStrings("__name__", "x", "w", strconv.Itoa(w), "i", strconv.Itoa(i))
	}
	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		retired = make(chan struct{}) // closed once a flush has retired series
		failed  = make(chan struct{}) // closed when the flushes stop on an error
		errs    = make(chan error, writers+2)
		flushes sync.WaitGroup
		paused  atomic.Int32 // writers waiting for a retirement
	)
	ctx := context.Background()
	flushes.Add(2)
	go func() { // flushes, each retiring what the writers left idle
		idleFlushes := 0
		defer flushes.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.flushHead(ctx, closeOld); err != nil {
				errs <- err
				close(failed)
				return
			}
			select {
			case <-retired:
				continue
			default:
			}
			if testutil.ToFloat64(db.metrics.seriesRetired) > 0 {
				close(retired)
				continue
			}
			if paused.Load() == writers/2 {
				// Every pausing writer is idle: its series are cut by one
				// flush and retired by it or the next.
				if idleFlushes++; idleFlushes == 3 {
					errs <- fmt.Errorf("no series retired after %d flushes with the paused writers' series idle", idleFlushes)
					close(failed)
					return
				}
			}
		}
	}()
	go func() { // queries
		defer flushes.Done()
		x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tryQueryFloats(db, 0, part, x); err != nil {
				errs <- err
				return
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if w%2 == 1 && r == rounds/2 {
					paused.Add(1)
					select {
					case <-retired:
					case <-failed:
						return
					}
				}
				app := db.Appender(ctx)
				for i := range series {
					// Late, in order: the first partition's last minutes.
					ts := part - int64(rounds-r)*1000
					if _, err := app.Append(0, lset(w, i), ts, float64(r)); err != nil {
						errs <- err
						return
					}
				}
				if err := app.Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flushes.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(db *DB, when string) {
		t.Helper()
		got := queryFloats(t, db, 0, part, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
		if len(got) != writers*series {
			t.Fatalf("%s: %d series, want %d", when, len(got), writers*series)
		}
		for k, ss := range got {
			if len(ss) != rounds {
				t.Fatalf("%s: series %s has %d samples, want %d", when, k, len(ss), rounds)
			}
			for r, s := range ss {
				if s.t != part-int64(rounds-r)*1000 || s.v != float64(r) {
					t.Fatalf("%s: series %s sample %d is %v", when, k, r, s)
				}
			}
		}
	}
	check(db, "after the writers")
	db = reopen(t, db, b, opts)
	defer db.Close()
	check(db, "after a restart")
}
