package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/gorilla"
	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// testLSMOptions keeps background work off so tests decide when things happen.
func testLSMOptions() lsm.Options {
	o := lsm.DefaultOptions()
	o.WALFlushInterval = 5 * time.Millisecond
	o.CompactionInterval = 0
	o.GCInterval = 0
	o.MemtableMaxAge = 0
	return o
}

func openTestDB(t testing.TB, b objstore.Bucket, opts Options) *DB {
	t.Helper()
	db, err := openOn(context.Background(), b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return db
}

// openMemDB opens a DB as openTestDB does on a new in-memory bucket, closed
// when the test ends (closing it before is fine); the bucket is returned for
// opening it again.
func openMemDB(t testing.TB, opts Options) (*DB, objstore.Bucket) {
	t.Helper()
	b := objstore.NewMemoryBucket()
	db := openTestDB(t, b, opts)
	t.Cleanup(func() { db.Close() })
	return db, b
}

// reopen closes db, failing t if that fails, and opens a DB on b again as
// openTestDB does: a restart.
func reopen(t testing.TB, db *DB, b objstore.Bucket, opts Options) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return openTestDB(t, b, opts)
}

// openTestReader opens a read-only DB on b under the prefix of openTestDB,
// with c as its cache (nil for none), that follows the writer only when
// told (no polling).
func openTestReader(t testing.TB, b objstore.Bucket, opts Options, c cache.Cache) *DB {
	t.Helper()
	ropts := lsm.DefaultReaderOptions()
	ropts.PollInterval = 0
	r, err := openReadOnlyOn(context.Background(), b, "tsdb", opts, ropts, c, Components{})
	if err != nil {
		t.Fatalf("open reader: %v", err)
	}
	return r
}

type tsample struct {
	t int64
	v float64
}

func appendFloats(t testing.TB, db *DB, lset labels.Labels, samples ...tsample) {
	t.Helper()
	app := db.Appender(context.Background())
	for _, s := range samples {
		if _, err := app.Append(0, lset, s.t, s.v); err != nil {
			t.Fatalf("append %s %d: %v", lset, s.t, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// wantCounts fails unless got holds series series of samples samples each.
func wantCounts(t testing.TB, what string, got map[string][]tsample, series, samples int) {
	t.Helper()
	if len(got) != series {
		t.Fatalf("%s: got %d series, want %d", what, len(got), series)
	}
	for k, s := range got {
		if len(s) != samples {
			t.Fatalf("%s: %s has %d samples, want %d", what, k, len(s), samples)
		}
	}
}

func queryFloats(t testing.TB, db *DB, mint, maxt int64, ms ...*labels.Matcher) map[string][]tsample {
	t.Helper()
	out, err := tryQueryFloats(db, mint, maxt, ms...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryQueryFloats is queryFloats for goroutines other than the test's, which
// must not call t.Fatal.
func tryQueryFloats(db *DB, mint, maxt int64, ms ...*labels.Matcher) (map[string][]tsample, error) {
	q, err := db.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, ms...)
	out := map[string][]tsample{}
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		it = s.Iterator(it)
		key := s.Labels().String()
		out[key] = []tsample{}
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			out[key] = append(out[key], tsample{ts, v})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("iterate %s: %w", key, err)
		}
	}
	if err := ss.Err(); err != nil {
		return nil, fmt.Errorf("select: %w", err)
	}
	return out, nil
}

func sameSamples(a, b []tsample) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].t != b[i].t || math.Float64bits(a[i].v) != math.Float64bits(b[i].v) {
			return false
		}
	}
	return true
}

func TestAppendQueryFlushReopen(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(map[bool]string{true: "wal=on", false: "wal=off"}[wal], func(t *testing.T) {
			opts := DefaultOptions()
			opts.WAL = wal
			db, b := openMemDB(t, opts)
			a := labels.FromStrings("__name__", "up", "job", "a")
			c := labels.FromStrings("__name__", "up", "job", "c")
			stale := math.Float64frombits(value.StaleNaN)
			var want []tsample
			for i := int64(0); i < 100; i++ {
				want = append(want, tsample{i * 15000, float64(i)})
			}
			want[50].v = stale
			want[51].v = math.Inf(-1)
			appendFloats(t, db, a, want[:60]...)
			appendFloats(t, db, c, tsample{0, 1})
			if err := db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			appendFloats(t, db, a, want[60:]...)

			m := labels.MustNewMatcher(labels.MatchEqual, "job", "a")
			got := queryFloats(t, db, math.MinInt64, math.MaxInt64, m)
			if !sameSamples(got[a.String()], want) || len(got) != 1 {
				t.Fatalf("before reopen: got %v", got)
			}
			db = reopen(t, db, b, opts)
			defer db.Close()
			got = queryFloats(t, db, math.MinInt64, math.MaxInt64, m)
			if !sameSamples(got[a.String()], want) {
				t.Fatalf("after reopen: got %v", got)
			}
			// Range bounds are inclusive.
			got = queryFloats(t, db, 15000, 45000, m)
			if !sameSamples(got[a.String()], want[1:4]) {
				t.Fatalf("range: got %v want %v", got[a.String()], want[1:4])
			}
			all := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
			if len(all) != 2 {
				t.Fatalf("want 2 series, got %v", all)
			}
		})
	}
}

func TestOutOfOrderAndDuplicates(t *testing.T) {
	opts := DefaultOptions()
	opts.OutOfOrderWindow = time.Hour
	db, _ := openMemDB(t, opts)
	s := labels.FromStrings("__name__", "x")
	appendFloats(t, db, s, tsample{10_000, 1}, tsample{20_000, 2}, tsample{30_000, 3})
	appendFloats(t, db, s, tsample{15_000, 1.5}, tsample{20_000, 20})
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64)
	_ = got
	got = queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	want := []tsample{{10_000, 1}, {15_000, 1.5}, {20_000, 20}, {30_000, 3}}
	if !sameSamples(got[s.String()], want) {
		t.Fatalf("got %v want %v", got[s.String()], want)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	if !sameSamples(got[s.String()], want) {
		t.Fatalf("after flush got %v want %v", got[s.String()], want)
	}

	// Older than the window: a backfill, accepted (TestBackfill).
	appendFloats(t, db, s, tsample{30_000 - 2*time.Hour.Milliseconds(), 1})

	// Without a window, out of order samples and conflicting duplicates fail.
	opts.OutOfOrderWindow = 0
	db2, _ := openMemDB(t, opts)
	appendFloats(t, db2, s, tsample{10_000, 1})
	app := db2.Appender(context.Background())
	if _, err := app.Append(0, s, 5_000, 1); err == nil || !errorsIs(err, promstorage.ErrOutOfOrderSample) {
		t.Fatalf("want out of order error, got %v", err)
	}
	if _, err := app.Append(0, s, 10_000, 2); err == nil || !errorsIs(err, promstorage.ErrDuplicateSampleForTimestamp) {
		t.Fatalf("want duplicate error, got %v", err)
	}
	if _, err := app.Append(0, s, 10_000, 1); err != nil {
		t.Fatalf("an identical resend is accepted: %v", err)
	}
	_ = app.Commit()
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// TestOutOfOrderAcrossPartitions checks that, without an out-of-order
// window, a sample older than the series' newest is refused when the newest
// is in a later partition and the sample's own partition has nothing newer.
func TestOutOfOrderAcrossPartitions(t *testing.T) {
	opts := DefaultOptions()
	opts.OutOfOrderWindow = 0
	db, _ := openMemDB(t, opts)
	part := opts.PartitionDuration.Milliseconds() * 10
	b := labels.FromStrings("__name__", "b")
	c := labels.FromStrings("__name__", "c")
	appendFloats(t, db, b, tsample{part + 60_000, 1})
	app := db.Appender(context.Background())
	if _, err := app.Append(0, b, part-60_000, 2); !errors.Is(err, promstorage.ErrOutOfOrderSample) {
		t.Fatalf("older than the newest sample, in the partition before: want out of order, got %v", err)
	}
	// A series with nothing newer takes the older partition's samples.
	if _, err := app.Append(0, c, part-60_000, 3); err != nil {
		t.Fatalf("a new series in the partition before: %v", err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "b|c"))
	if want := []tsample{{part + 60_000, 1}}; !sameSamples(got[b.String()], want) {
		t.Fatalf("b: got %v want %v", got[b.String()], want)
	}
	if want := []tsample{{part - 60_000, 3}}; !sameSamples(got[c.String()], want) {
		t.Fatalf("c: got %v want %v", got[c.String()], want)
	}

	// With a window the same sample is accepted, unless the append asks
	// for in-order samples (as rule evaluation does).
	opts.OutOfOrderWindow = 10 * time.Minute
	db2, _ := openMemDB(t, opts)
	appendFloats(t, db2, b, tsample{part + 60_000, 1})
	a2 := db2.AppenderV2(context.Background())
	if _, err := a2.Append(0, b, 0, part-60_000, 2, nil, nil, promstorage.AppendV2Options{RejectOutOfOrder: true}); !errors.Is(err, promstorage.ErrOutOfOrderSample) {
		t.Fatalf("in-order append: want out of order, got %v", err)
	}
	if _, err := a2.Append(0, b, 0, part-60_000, 2, nil, nil, promstorage.AppendV2Options{}); err != nil {
		t.Fatalf("within the window: %v", err)
	}
	if err := a2.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestOutOfOrderAcrossPartitionsAtCommit commits, with out-of-order samples
// refused, a sample older than one another appender committed in the next
// partition after both were appended: the older one is refused at Commit,
// as it would have been at Append had the newer one come first.
func TestOutOfOrderAcrossPartitionsAtCommit(t *testing.T) {
	opts := DefaultOptions()
	opts.OutOfOrderWindow = 0
	db, _ := openMemDB(t, opts)
	part := opts.PartitionDuration.Milliseconds() * 10
	b := labels.FromStrings("__name__", "b")
	older := db.Appender(context.Background())
	if _, err := older.Append(0, b, part-60_000, 1); err != nil {
		t.Fatal(err)
	}
	newer := db.Appender(context.Background())
	if _, err := newer.Append(0, b, part+60_000, 2); err != nil {
		t.Fatal(err)
	}
	if err := newer.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := older.Commit(); !errors.Is(err, promstorage.ErrOutOfOrderSample) {
		t.Fatalf("commit of the older sample after the newer one: want out of order, got %v", err)
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "b"))
	if want := []tsample{{part + 60_000, 2}}; !sameSamples(got[b.String()], want) {
		t.Fatalf("b: got %v want %v", got[b.String()], want)
	}
	if n := testutil.ToFloat64(db.metrics.rejected.WithLabelValues("commit_conflict")); n != 1 {
		t.Fatalf("commit_conflict rejections: %g, want 1", n)
	}
}

func TestDeleteSeries(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			db, b := openMemDB(t, DefaultOptions())
			a := labels.FromStrings("__name__", "m", "job", "a")
			c := labels.FromStrings("__name__", "m", "job", "c")
			var all []tsample
			for i := int64(0); i < 10; i++ {
				all = append(all, tsample{i * 1000, float64(i)})
			}
			appendFloats(t, db, a, all...)
			appendFloats(t, db, c, all...)
			if flushed {
				if err := db.flushHead(context.Background(), closeAll); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Delete(context.Background(), 3000, 5000, labels.MustNewMatcher(labels.MatchEqual, "job", "a")); err != nil {
				t.Fatal(err)
			}
			want := append(append([]tsample(nil), all[:3]...), all[6:]...)
			check := func(what string) {
				t.Helper()
				got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
				if !sameSamples(got[a.String()], want) {
					t.Fatalf("%s: deleted series: got %v want %v", what, got[a.String()], want)
				}
				if !sameSamples(got[c.String()], all) {
					t.Fatalf("%s: other series changed: %v", what, got[c.String()])
				}
			}
			check("after delete")
			db = reopen(t, db, b, DefaultOptions())
			defer db.Close()
			check("after reopen")
		})
	}
}

func TestRetentionDropsPartitions(t *testing.T) {
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	opts.Retention = 2 * time.Hour
	opts.OutOfOrderWindow = 0
	db, _ := openMemDB(t, opts)
	s := labels.FromStrings("__name__", "r")
	hour := time.Hour.Milliseconds()
	for h := int64(0); h < 6; h++ {
		appendFloats(t, db, s, tsample{h * hour, float64(h)}, tsample{h*hour + hour/2, float64(h)})
		if err := db.flushHead(context.Background(), closeOld); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.applyRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "r"))[s.String()]
	// Newest sample at 5.5 h: partitions ending at or before 3.5 h go.
	if len(got) == 0 || got[0].t < 3*hour {
		t.Fatalf("retention kept %v", got)
	}
	if got[len(got)-1].t != 5*hour+hour/2 {
		t.Fatalf("retention lost recent data: %v", got)
	}
	parts, err := db.partitions(context.Background(), math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if parts[0].start < 3*hour {
		t.Fatalf("partition %d survived retention", parts[0].start)
	}
}

// TestHeadFlushSamplesAsksForFlush checks that commits past HeadFlushSamples
// ask Run for an early flush, and that a flush resets the count.
func TestHeadFlushSamplesAsksForFlush(t *testing.T) {
	opts := DefaultOptions()
	opts.HeadFlushSamples = 100
	db, _ := openMemDB(t, opts)
	s := labels.FromStrings("__name__", "burst")
	var batch []tsample
	for i := int64(0); i < 60; i++ {
		batch = append(batch, tsample{i * 1000, float64(i)})
	}
	appendFloats(t, db, s, batch...)
	if len(db.flushNow) != 0 {
		t.Fatal("a flush was asked for below the threshold")
	}
	for i := range batch {
		batch[i].t += 60_000
	}
	appendFloats(t, db, s, batch...)
	if len(db.flushNow) != 1 {
		t.Fatal("no flush asked for past the threshold")
	}
	// The flush takes the samples that asked for it, and the request with
	// them: Run, which received none here, would otherwise flush again at
	// once and write a block of the few samples that came meanwhile.
	if err := db.flushHead(context.Background(), closeOld); err != nil {
		t.Fatal(err)
	}
	if n := db.head.unflushed.Load(); n != 0 {
		t.Fatalf("unflushed samples after a flush: %d", n)
	}
	if len(db.flushNow) != 0 {
		t.Fatal("a flush left the request for it pending")
	}

	// With many series the threshold is a few samples per series: 10 series
	// written by a flush call for 10*flushSamplesPerSeries samples, more
	// than the 100 set.
	appendFloats(t, db, s, tsample{200_000, 1})
	for i := range 9 {
		appendFloats(t, db, labels.FromStrings("__name__", "other", "i", fmt.Sprint(i)), tsample{200_000, 1})
	}
	if err := db.flushHead(context.Background(), closeNone); err != nil {
		t.Fatal(err)
	}
	if got, want := db.head.flushAt.Load(), int64(10*flushSamplesPerSeries); got != want {
		t.Fatalf("flush threshold with 10 series: %d, want %d", got, want)
	}

	// Series that came after the last flush raise the threshold when it is
	// reached: 20 series in a fresh head, whose threshold is the 100 set,
	// ask for no flush until they hold 20*flushSamplesPerSeries samples.
	db2, _ := openMemDB(t, opts)
	for round := int64(0); round < flushSamplesPerSeries; round++ {
		app := db2.Appender(context.Background())
		for i := range 20 {
			if _, err := app.Append(0, labels.FromStrings("__name__", "other", "i", fmt.Sprint(i)), round*1000, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		if round < flushSamplesPerSeries-1 && len(db2.flushNow) != 0 {
			t.Fatalf("a flush was asked for at %d samples, %d series", (round+1)*20, 20)
		}
	}
	if got, want := db2.head.flushAt.Load(), int64(20*flushSamplesPerSeries); got != want {
		t.Fatalf("flush threshold after 20 new series: %d, want %d", got, want)
	}
	if len(db2.flushNow) != 1 {
		t.Fatal("no flush asked for at 20*flushSamplesPerSeries samples")
	}
}

// TestHeadStatsAcrossPartitions checks that cardinality counts a series in
// two open partitions once, and one in either.
func TestHeadStatsAcrossPartitions(t *testing.T) {
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	db, _ := openMemDB(t, opts)
	hour := time.Hour.Milliseconds()
	both := labels.FromStrings("__name__", "both", "job", "a")
	appendFloats(t, db, both, tsample{hour - 1000, 1}, tsample{hour + 1000, 2})
	appendFloats(t, db, labels.FromStrings("__name__", "early", "job", "b"), tsample{hour - 2000, 1})
	appendFloats(t, db, labels.FromStrings("__name__", "late", "job", "a"), tsample{hour + 2000, 1})
	st, mint, maxt, ok := db.HeadStats(10)
	if !ok || st.NumSeries != 3 || mint != hour-2000 || maxt != hour+2000 {
		t.Fatalf("head stats: %d series, [%d, %d], ok %v; want 3 series, [%d, %d]", st.NumSeries, mint, maxt, ok, hour-2000, hour+2000)
	}
	union := index.NewMemIndex()
	for _, lset := range []labels.Labels{both, labels.FromStrings("__name__", "early", "job", "b"), labels.FromStrings("__name__", "late", "job", "a")} {
		union.GetOrCreate(lset)
	}
	if want := union.Stats(10); fmt.Sprint(st) != fmt.Sprint(want) {
		t.Fatalf("head stats:\n got %+v\nwant %+v (one index holding each series once)", st, want)
	}
}

// TestOverlappingSources checks which in-memory and stored sources a query
// of [mint, maxt] decodes.
func TestOverlappingSources(t *testing.T) {
	block := func(ts ...int64) []byte {
		var smps []sample
		for _, t := range ts {
			smps = append(smps, sample{t: t, v: 1})
		}
		blks, err := encodeSamples(nil, smps)
		if err != nil || len(blks) != 1 {
			t.Fatal(blks, err)
		}
		return blks[0]
	}
	app := gorilla.NewAppender()
	for _, ts := range []int64{500, 600} {
		if err := app.Append(ts, 2); err != nil {
			t.Fatal(err)
		}
	}
	srcs := []gorilla.Source{
		{Block: block(100, 200)},
		{Block: block(250, 300)},
		{Block: []byte{0xff}}, // damaged: kept for the iterator to report
		{App: app},
		{App: gorilla.NewAppender()}, // empty
		{Block: nil},
	}
	for _, c := range []struct {
		mint, maxt int64
		want       []int // indexes into srcs
	}{
		{math.MinInt64, math.MaxInt64, []int{0, 1, 2, 3}},
		{201, 299, []int{1, 2}},
		{300, 500, []int{1, 2, 3}},
		{601, 700, []int{2}},
		{0, 99, []int{2}},
	} {
		got := overlapping(nil, srcs, c.mint, c.maxt)
		if len(got) != len(c.want) {
			t.Fatalf("[%d, %d]: %d sources, want %v", c.mint, c.maxt, len(got), c.want)
		}
		for i, w := range c.want {
			if got[i].App != srcs[w].App || string(got[i].Block) != string(srcs[w].Block) {
				t.Fatalf("[%d, %d]: source %d is not srcs[%d]", c.mint, c.maxt, i, w)
			}
		}
	}
}

// TestExemplarStoreRing checks that the exemplar ring, which grows as
// exemplars arrive, keeps the newest size of them once it wraps.
func TestExemplarStoreRing(t *testing.T) {
	lset := labels.FromStrings("__name__", "x")
	all := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")}
	for _, c := range []struct {
		size, added int
		want        []int64
	}{
		{0, 3, nil},
		{3, 2, []int64{1, 2}},
		{3, 3, []int64{1, 2, 3}},
		{3, 7, []int64{5, 6, 7}},
		{100, 150, nil}, // checked by count below
	} {
		s := newExemplarStore(c.size)
		for i := 1; i <= c.added; i++ {
			s.add(lset, exemplar.Exemplar{Ts: int64(i), Value: float64(i), HasTs: true})
		}
		res, err := exemplarQuerier{s}.Select(math.MinInt64, math.MaxInt64, all)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, r := range res {
			for _, e := range r.Exemplars {
				got = append(got, e.Ts)
			}
		}
		if c.size == 100 {
			if len(got) != 100 || got[0] != 51 || got[99] != 150 || len(s.ring) != 100 {
				t.Errorf("size 100, 150 added: %d exemplars %v..., ring %d", len(got), got[:min(2, len(got))], len(s.ring))
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("size %d, %d added: got %v, want %v", c.size, c.added, got, c.want)
		}
	}
}

// TestSelectSortSeries checks Select's order contract: with sortSeries the
// series come in label order (here not the order they were created in, and
// spread over two partitions, one of them closed); without it they come in
// some order, all of them once; the series API (hints.Func "series") gets
// label order either way.
func TestSelectSortSeries(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	part := DefaultOptions().PartitionDuration.Milliseconds()
	var want []string
	for i := 9; i >= 0; i-- {
		lset := labels.FromStrings("__name__", "up", "job", fmt.Sprint(i))
		appendFloats(t, db, lset, tsample{part - 1000, 1})
		appendFloats(t, db, lset, tsample{part + 1000, 2})
		want = append([]string{lset.String()}, want...)
	}
	// A later series sorts first.
	late := labels.FromStrings("__name__", "up", "instance", "x", "job", "9")
	appendFloats(t, db, late, tsample{part + 2000, 3})
	want = append([]string{late.String()}, want...)
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		t.Fatal(err)
	}
	appendFloats(t, db, labels.FromStrings("__name__", "up", "job", "0"), tsample{part + 3000, 4})

	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")
	selectNames := func(sortSeries bool, hints *promstorage.SelectHints) []string {
		q, err := db.Querier(math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		var got []string
		ss := q.Select(context.Background(), sortSeries, hints, m)
		l, ok := ss.(interface{ Len() int })
		if !ok || l.Len() != len(want) {
			t.Fatalf("Len of the selected set: %v, want %d", l, len(want))
		}
		for ss.Next() {
			got = append(got, ss.At().Labels().String())
			if l.Len() != len(want)-len(got) {
				t.Fatalf("Len after %d series: %d, want %d", len(got), l.Len(), len(want)-len(got))
			}
		}
		if err := ss.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	rate := &promstorage.SelectHints{Start: math.MinInt64, End: math.MaxInt64, Func: "rate"}
	series := &promstorage.SelectHints{Start: math.MinInt64, End: math.MaxInt64, Func: "series"}
	if got := selectNames(true, rate); !slices.Equal(got, want) {
		t.Errorf("sorted select:\n got %v\nwant %v", got, want)
	}
	if got := selectNames(false, series); !slices.Equal(got, want) {
		t.Errorf("series API select:\n got %v\nwant %v", got, want)
	}
	got := selectNames(false, rate)
	slices.Sort(got)
	sortedWant := slices.Clone(want)
	slices.Sort(sortedWant)
	if !slices.Equal(got, sortedWant) {
		t.Errorf("unsorted select returned %v, want the series %v", got, sortedWant)
	}
}

// TestPartitionDurationFixed: data written with one partition duration is
// not opened with another, by the writer or a reader; the error names both.
func TestPartitionDurationFixed(t *testing.T) {
	opts := DefaultOptions()
	db, b := openMemDB(t, opts)
	appendFloats(t, db, labels.FromStrings("__name__", "x"), tsample{1000, 1})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	other := opts
	other.PartitionDuration = time.Hour
	if _, err := openOn(context.Background(), b, "tsdb", other, testLSMOptions(), nil, Components{}); err == nil ||
		!strings.Contains(err.Error(), "--storage.partition-duration=2h0m0s") || !strings.Contains(err.Error(), "1h0m0s") {
		t.Fatalf("writer with another partition duration: %v", err)
	}
	ropts := lsm.DefaultReaderOptions()
	ropts.PollInterval = 0
	if _, err := openReadOnlyOn(context.Background(), b, "tsdb", other, ropts, nil, Components{}); err == nil {
		t.Fatal("a reader with another partition duration opened")
	}
	db = openTestDB(t, b, opts)
	defer db.Close()
}
