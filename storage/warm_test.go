package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/objstore"
)

func TestWarmOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    WarmOptions
		ok   bool
	}{
		{"default", DefaultWarmOptions(), true},
		{"off", WarmOptions{}, true},
		{"negative age", WarmOptions{Age: -time.Hour, CheckInterval: time.Second}, false},
		{"no interval", WarmOptions{Age: time.Hour}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestWarmLoadsRecentPartitions warms a cold reader with the partitions of
// the last 3 h: a query over them then makes no object-store read, one over
// older partitions still does.
func TestWarmLoadsRecentPartitions(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 20, span: 8 * time.Hour, interval: time.Minute})
	db, fb, _ := coldDB(t, b, 0, 64<<20)
	ctx := context.Background()
	st, err := db.Warm(ctx, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The newest sample is at 8h-1m: the partitions [4h, 6h) and [6h, 8h)
	// end after 5h-1m.
	if st.Partitions != 2 || st.Requests == 0 || st.Bytes == 0 {
		t.Fatalf("warm: %+v, want 2 partitions read", st)
	}
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	fb.ResetCounts()
	got := queryFloats(t, db, coldBase+4*3600*1000, coldBase+8*3600*1000, x)
	wantCounts(t, "query", got, 20, 240)
	if r := getRequests(fb); r != 0 {
		t.Fatalf("a query of warmed partitions made %d object-store reads", r)
	}
	queryFloats(t, db, coldBase, coldBase+2*3600*1000-1, x)
	if getRequests(fb) == 0 {
		t.Fatal("a query of a partition older than the warm age made no object-store read")
	}
	st, err = db.Warm(ctx, 3*time.Hour)
	if err != nil || st.Requests != 0 {
		t.Fatalf("warming again: %+v, %v; want no reads", st, err)
	}
}

type warmRound struct {
	version uint64
	st      WarmStats
	err     error
}

// startTestWarmer starts a warmer that reports each round on the returned
// channel.
func startTestWarmer(t *testing.T, db *DB, age time.Duration, reg prometheus.Registerer) <-chan warmRound {
	t.Helper()
	rounds := make(chan warmRound, 1000)
	w, err := db.startWarmer(WarmOptions{Age: age, CheckInterval: time.Millisecond}, reg, func(v uint64, st WarmStats, err error) {
		rounds <- warmRound{v, st, err}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return rounds
}

// nextRound waits for a round that satisfies ok.
func nextRound(t *testing.T, rounds <-chan warmRound, ok func(warmRound) bool) warmRound {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case r := <-rounds:
			if ok(r) {
				return r
			}
		case <-timeout.C:
			t.Fatal("no warming round in a minute")
		}
	}
}

func writeSpan(t *testing.T, db *DB, from, to int64, series int) {
	t.Helper()
	for ts := from; ts < to; ts += 60_000 {
		app := db.Appender(context.Background())
		for i := range series {
			if _, err := app.Append(0, labels.FromStrings("__name__", "x", "i", string(rune('a'+i))), ts, float64(ts)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// newTestCache returns a cache of memoryBytes in RAM, closed when the test
// ends.
func newTestCache(t testing.TB, memoryBytes int64) cache.Cache {
	t.Helper()
	o := cache.DefaultOptions()
	o.MemoryBytes = memoryBytes
	c, err := cache.New(o, cache.Components{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWarmerFollowsWriter runs the warmer on a writer: it warms at start,
// again after a flush adds a table and after a compaction replaces them, so
// that queries of recent data never read the object store.
func TestWarmerFollowsWriter(t *testing.T) {
	ctx := context.Background()
	fb := objstore.NewFaultBucket(objstore.NewMemoryBucket())
	opts := coldOptions()
	lopts := testLSMOptions()
	lopts.L0CompactionTrigger = 1 // Compact below merges the flushed tables
	db, err := openOn(ctx, fb, "tsdb", opts, lopts, newTestCache(t, 64<<20), Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lsmDB := db.w
	const hour = 3600 * 1000
	writeSpan(t, db, coldBase, coldBase+2*hour, 5)
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := lsmDB.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rounds := startTestWarmer(t, db, 6*time.Hour, reg)
	r := nextRound(t, rounds, func(warmRound) bool { return true })
	if r.err != nil || r.st.Partitions != 1 || r.st.Bytes == 0 {
		t.Fatalf("first round: %+v", r)
	}
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	check := func(what string, mint, maxt int64, wantSamples int) {
		t.Helper()
		fb.ResetCounts()
		got := queryFloats(t, db, mint, maxt, x)
		wantCounts(t, what, got, 5, wantSamples)
		if n := getRequests(fb); n != 0 {
			t.Fatalf("%s: the query made %d object-store reads", what, n)
		}
	}
	check("after start", coldBase, coldBase+2*hour, 120)

	writeSpan(t, db, coldBase+2*hour, coldBase+4*hour, 5)
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := lsmDB.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	v := lsmDB.ManifestVersion()
	nextRound(t, rounds, func(r warmRound) bool { return r.version >= v && r.err == nil })
	check("after a flush", coldBase, coldBase+4*hour, 240)

	if err := lsmDB.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	v2 := lsmDB.ManifestVersion()
	if v2 == v {
		t.Fatal("compaction did not change the manifest")
	}
	r = nextRound(t, rounds, func(r warmRound) bool { return r.version >= v2 && r.err == nil })
	if r.st.Bytes == 0 {
		t.Fatalf("the round after compaction read nothing: %+v", r)
	}
	check("after a compaction", coldBase, coldBase+4*hour, 240)
	if n := testutil.ToFloat64(prometheusCounter(t, reg, "shale_storage_cache_warm_runs_total")); n < 3 {
		t.Fatalf("shale_storage_cache_warm_runs_total = %v, want at least 3", n)
	}
}

// prometheusCounter returns the sum of a counter family from reg.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name})
	c.Add(sum)
	return c
}

// TestWarmerFollowsReader runs the warmer on a read-only replica: after it
// sees the writer's newer manifest, the new data is in its cache.
func TestWarmerFollowsReader(t *testing.T) {
	ctx := context.Background()
	opts := coldOptions()
	w, mem := openMemDB(t, opts)
	const hour = 3600 * 1000
	writeSpan(t, w, coldBase, coldBase+2*hour, 5)
	if err := w.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := w.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	fb := objstore.NewFaultBucket(mem)
	r := openTestReader(t, fb, opts, newTestCache(t, 64<<20))
	defer r.Close()
	rounds := startTestWarmer(t, r, 6*time.Hour, nil)
	nextRound(t, rounds, func(r warmRound) bool { return r.err == nil })

	writeSpan(t, w, coldBase+2*hour, coldBase+4*hour, 5)
	if err := w.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := w.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	v := r.r.ManifestVersion()
	nextRound(t, rounds, func(rd warmRound) bool { return rd.version >= v && rd.err == nil })
	fb.ResetCounts()
	got := queryFloats(t, r, coldBase, coldBase+4*hour, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	wantCounts(t, "query", got, 5, 240)
	if n := getRequests(fb); n != 0 {
		t.Fatalf("the reader's query made %d object-store reads", n)
	}
}

// TestWarmerRetriesAfterFailure: a round that fails is tried again at the
// next check even though the manifest did not change.
func TestWarmerRetriesAfterFailure(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 20, span: 4 * time.Hour, interval: time.Minute})
	db, fb, _ := coldDB(t, b, 0, 64<<20)
	boom := errors.New("boom")
	remove := fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpGetRange}, Err: boom})
	rounds := startTestWarmer(t, db, 6*time.Hour, nil)
	r := nextRound(t, rounds, func(warmRound) bool { return true })
	if !errors.Is(r.err, boom) {
		t.Fatalf("first round: %v, want %v", r.err, boom)
	}
	remove()
	r = nextRound(t, rounds, func(r warmRound) bool { return r.err == nil })
	if r.st.Partitions != 2 {
		t.Fatalf("round after recovery: %+v", r)
	}
}

// TestWarmerStops: Stop ends the warmer before or after Close, twice is
// fine, and a warmer with age 0 starts nothing.
func TestWarmerStops(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 20, span: 4 * time.Hour, interval: time.Minute})
	db, _, _ := coldDB(t, b, 0, 64<<20)
	off, err := db.StartWarmer(WarmOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	off.Stop()
	if _, err := db.StartWarmer(WarmOptions{Age: -1}, nil); err == nil {
		t.Fatal("a negative age was accepted")
	}
	w, err := db.StartWarmer(WarmOptions{Age: time.Hour, CheckInterval: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop()
}
