package storage

import (
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/internal/seriestest"
	"github.com/shaledb/shale/storage/objstore"
)

// gatedBucket holds the first Put after armed until release is closed,
// saying so on reached.
type gatedBucket struct {
	objstore.Bucket
	armed            atomic.Bool
	once             sync.Once
	reached, release chan struct{}
}

func (g *gatedBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	if g.armed.Load() {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return g.Bucket.Put(ctx, name, r, size, opts)
}

// TestLateSampleWaitsForWriteOut: a sample for a partition that a flush is
// writing out for good waits for the flush and then lands, where it was
// answered 503 (a sender catching up hours behind met one for every request
// during each such flush).
func TestLateSampleWaitsForWriteOut(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.WAL = false
	g := &gatedBucket{Bucket: objstore.NewMemoryBucket(), reached: make(chan struct{}), release: make(chan struct{})}
	db := openTestDB(t, g, opts)
	defer db.Close()

	now := time.Now().UnixMilli()
	late := now - (3 * time.Hour).Milliseconds() // a partition the flush closes
	onTime, behind := labels.FromStrings("__name__", "m", "s", "on_time"), labels.FromStrings("__name__", "m", "s", "late")
	app := db.Appender(ctx)
	for _, s := range []struct {
		lset labels.Labels
		t    int64
	}{{onTime, now}, {behind, late}} {
		if _, err := app.Append(0, s.lset, s.t, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}

	// The partition took a sample since the last flush: this one writes
	// it out and keeps it open; the next closes it.
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	db.waitingHook = func() { waiting <- struct{}{} }
	g.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- db.flushHead(ctx, closeOld) }()
	<-g.reached // the late sample's partition is closed, its data on the way out

	appended := make(chan error, 1)
	go func() {
		app := db.Appender(ctx)
		if _, err := app.Append(0, behind, late+1000, 2); err != nil {
			appended <- err
			return
		}
		appended <- app.Commit()
	}()
	select {
	case err := <-appended:
		close(g.release)
		<-flushed
		t.Fatalf("a late sample during the write-out was answered %v; want it to wait", err)
	case <-waiting:
	}
	close(g.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatalf("the late sample after the write-out: %v", err)
	}
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := seriestest.ReadAll(t, q)[behind.String()]; len(got) != 2 {
		t.Fatalf("late series: %d samples, want 2", len(got))
	}
}

// at is a sample of the series lset at t.
type at struct {
	lset labels.Labels
	t    int64
}

// appendAll appends v to each of samples in a new transaction, left for
// the caller to commit.
func appendAll(t *testing.T, db *DB, v float64, samples ...at) promstorage.Appender {
	t.Helper()
	app := db.Appender(context.Background())
	for _, s := range samples {
		if _, err := app.Append(0, s.lset, s.t, v); err != nil {
			t.Fatal(err)
		}
	}
	return app
}

// commitAll appends v to each of samples and commits them.
func commitAll(t *testing.T, db *DB, v float64, samples ...at) {
	t.Helper()
	if err := appendAll(t, db, v, samples...).Commit(); err != nil {
		t.Fatal(err)
	}
}

// flushOld flushes the head n times, closing the partitions behind the
// window that went a flush without samples.
func flushOld(t *testing.T, db *DB, n int) {
	t.Helper()
	for range n {
		if err := db.flushHead(context.Background(), closeOld); err != nil {
			t.Fatal(err)
		}
	}
}

// samplesOf returns how many samples db holds of each series.
func samplesOf(t *testing.T, db *DB) map[string]int {
	t.Helper()
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	n := map[string]int{}
	for k, ps := range seriestest.ReadAll(t, q) {
		n[k] = len(ps)
	}
	return n
}

// TestCommitAfterWriteOut: samples appended to a partition that a flush
// then writes out for good, before their commit, are appended again at the
// commit (the partition opens again) rather than answered 503: concurrent
// backfills met that answer in most requests, each flush they caused
// closing the partitions of the others' transactions.
func TestCommitAfterWriteOut(t *testing.T) {
	for _, wal := range []bool{false, true} {
		t.Run(map[bool]string{false: "wal=off", true: "wal=on"}[wal], func(t *testing.T) {
			opts := DefaultOptions()
			opts.WAL = wal
			db := openTestDB(t, objstore.NewMemoryBucket(), opts)
			defer db.Close()

			now := time.Now().UnixMilli()
			late := now - (3 * time.Hour).Milliseconds() // a partition the flush closes
			onTime, behind := labels.FromStrings("__name__", "m", "s", "on_time"), labels.FromStrings("__name__", "m", "s", "late")
			commitAll(t, db, 1, at{onTime, now}, at{behind, late})
			app := appendAll(t, db, 2, at{behind, late + 1000}, at{behind, late + 2000}, at{onTime, now + 1000})
			// The first flush keeps the partition open (appended to
			// since the flush before); the second closes it.
			flushOld(t, db, 2)
			if err := app.Commit(); err != nil {
				t.Fatalf("commit after the partition was written out: %v", err)
			}
			if got := samplesOf(t, db); got[behind.String()] != 3 || got[onTime.String()] != 2 {
				t.Fatalf("late series %d samples, on-time %d; want 3 and 2", got[behind.String()], got[onTime.String()])
			}
		})
	}
}

// TestRecommitOutOfBounds: a sample appended again at commit that newer
// samples have since moved out of the retention is dropped as retention
// drops what it took, not failing the commit (Prometheus checks the bounds
// only at Append too); the commit's other samples are stored.
func TestRecommitOutOfBounds(t *testing.T) {
	opts := DefaultOptions()
	opts.Retention = 4 * time.Hour
	db := openTestDB(t, objstore.NewMemoryBucket(), opts)
	defer db.Close()

	base := time.Now().Add(-10 * time.Hour).UnixMilli()
	late := base - (3 * time.Hour).Milliseconds()
	onTime, behind := labels.FromStrings("__name__", "m", "s", "on_time"), labels.FromStrings("__name__", "m", "s", "late")
	commitAll(t, db, 1, at{onTime, base}, at{behind, late})
	app := appendAll(t, db, 2, at{behind, late + 1000}, at{onTime, base + 1000})
	// The retention now starts after late; the second flush closes its
	// partition.
	commitAll(t, db, 3, at{onTime, base + (2 * time.Hour).Milliseconds()})
	flushOld(t, db, 2)
	if err := app.Commit(); err != nil {
		t.Fatalf("commit whose written-out sample fell out of the retention meanwhile: %v", err)
	}
	if got := samplesOf(t, db)[onTime.String()]; got != 3 {
		t.Fatalf("on-time series: %d samples, want 3", got)
	}
}

// TestBackfilledPartitionStaysOpen: a flush writes out a partition behind
// the out-of-order window that took samples since the flush before, but
// keeps it open, so a backfill writing into it does not open it again after
// every flush; the first flush it goes without samples closes it.
func TestBackfilledPartitionStaysOpen(t *testing.T) {
	db := openTestDB(t, objstore.NewMemoryBucket(), DefaultOptions())
	defer db.Close()
	now := time.Now().UnixMilli()
	late := now - (3 * time.Hour).Milliseconds()
	lset := labels.FromStrings("__name__", "m")
	open := func() bool {
		db.head.mu.RLock()
		defer db.head.mu.RUnlock()
		p := db.head.parts[db.partitionOf(late)]
		return p != nil && !p.closed.Load()
	}
	commitAll(t, db, 1, at{lset, now})
	for i := range 3 {
		commitAll(t, db, 1, at{lset, late + int64(i)*1000})
		flushOld(t, db, 1)
		if !open() {
			t.Fatalf("flush %d closed the partition a backfill writes into", i+1)
		}
	}
	flushOld(t, db, 1)
	if open() {
		t.Fatal("a flush after one without samples left the partition open")
	}
	if got := samplesOf(t, db)[lset.String()]; got != 4 {
		t.Fatalf("%d samples, want 4", got)
	}
}
