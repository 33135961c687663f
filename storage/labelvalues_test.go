package storage

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/objstore"
)

// TestLabelValuesWithMatchers asks a label's values among the series that
// match, of a partition in the head and of the same written out to the LSM:
// many values (one scan of the label's postings), few (point reads), and
// matchers that select none, some and all of them.
func TestLabelValuesWithMatchers(t *testing.T) {
	ctx := context.Background()
	db, _ := openMemDB(t, DefaultOptions())
	ts := time.Now().Add(-time.Hour).UnixMilli()
	// Several series a value, so that the values' postings are read rather
	// than the selected series' labels.
	for i := range 40 {
		for j := range 4 {
			appendFloats(t, db, labels.FromStrings("__name__", "cpu", "instance", fmt.Sprintf("h%02d", i), "mode", []string{"idle", "user"}[(i+j)%2], "cpu", fmt.Sprint(j)), tsample{ts, 1})
		}
		if i%4 == 0 {
			appendFloats(t, db, labels.FromStrings("__name__", "up", "instance", fmt.Sprintf("h%02d", i)), tsample{ts, 1})
		}
	}
	want := func(step int, filter func(i int) bool) []string {
		var out []string
		for i := 0; i < 40; i += step {
			if filter(i) {
				out = append(out, fmt.Sprintf("h%02d", i))
			}
		}
		return out
	}
	cases := []struct {
		ms   []*labels.Matcher
		want []string
	}{
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "cpu")}, want(1, func(int) bool { return true })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")}, want(4, func(int) bool { return true })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "mode", "user"), labels.MustNewMatcher(labels.MatchEqual, "cpu", "0")}, want(1, func(i int) bool { return i%2 == 1 })},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "mode", "none")}, nil},
		// Few values left by a matcher on the label itself: point reads.
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "instance", "h0[0-3]"), labels.MustNewMatcher(labels.MatchEqual, "mode", "idle")}, []string{"h00", "h01", "h02", "h03"}},
	}
	check := func(where string) {
		t.Helper()
		q, err := db.Querier(math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for _, c := range cases {
			got, _, err := q.LabelValues(ctx, "instance", nil, c.ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
				t.Fatalf("%s: values of instance for %v: got %v, want %v", where, c.ms, got, c.want)
			}
		}
	}
	check("head")
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	check("written out")
}

// TestSeriesAPIListsSeriesWithSamplesInRange asks the series API's select
// (hints.Func "series") of a writer's head for ranges before, across and
// after the end of a series that stopped: as Prometheus, a series whose
// newest sample is older than the range is not listed, in the head and once
// retired after a write-out.
func TestSeriesAPIListsSeriesWithSamplesInRange(t *testing.T) {
	db, b := openMemDB(t, DefaultOptions())
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	writeRunningAndStopped(t, db, base, 0, 20)
	check := func(where string, db *DB) {
		t.Helper()
		for _, c := range []struct {
			mint, maxt int64
			want       []string
		}{
			{base, base + 20*60_000, []string{"running", "stopped"}},
			{base + 9*60_000, base + 20*60_000, []string{"running", "stopped"}}, // its last sample is at the start
			{base + 9*60_000 + 1, base + 20*60_000, []string{"running"}},
		} {
			if got := seriesAPIJobs(t, db, c.mint, c.maxt); !slices.Equal(got, c.want) {
				t.Fatalf("%s: series in [%d, %d] of the data: %v, want %v", where, (c.mint-base)/60_000, (c.maxt-base)/60_000, got, c.want)
			}
		}
	}
	// A partition written out and closed is read from the LSM, where the
	// partition's stored newest times tell the series that ended; by a
	// writer and by a reader alike.
	checkThroughWriteOut(t, db, b, check)
}

// checkThroughWriteOut calls check on db with its data in the head, written
// out, in a closed partition, then on a reader of b and on db restarted.
func checkThroughWriteOut(t *testing.T, db *DB, b objstore.Bucket, check func(where string, db *DB)) {
	t.Helper()
	ctx := context.Background()
	check("head", db)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a write-out", db)
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	check("closed", db)
	r := openTestReader(t, b, DefaultOptions(), nil)
	defer r.Close()
	check("closed, on a reader", r)
	db = reopen(t, db, b, DefaultOptions())
	defer db.Close()
	check("closed, after a restart", db)
}

// writeRunningAndStopped writes a sample a minute from base for minutes
// [from, to) of up{job="running"}, and of up{job="stopped"} for those
// before minute 10.
func writeRunningAndStopped(t *testing.T, db *DB, base, from, to int64) {
	t.Helper()
	stopped := labels.FromStrings("__name__", "up", "job", "stopped")
	running := labels.FromStrings("__name__", "up", "job", "running")
	for i := from; i < to; i++ {
		appendFloats(t, db, running, tsample{base + i*60_000, 1})
		if i < 10 {
			appendFloats(t, db, stopped, tsample{base + i*60_000, 1})
		}
	}
}

// seriesAPIJobs returns the job label of each series of up that db's
// series-API select (hints.Func "series") lists for [mint, maxt].
func seriesAPIJobs(t *testing.T, db *DB, mint, maxt int64) []string {
	t.Helper()
	q, err := db.Querier(mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, &promstorage.SelectHints{Start: mint, End: maxt, Func: "series"},
		labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
	var jobs []string
	for ss.Next() {
		jobs = append(jobs, ss.At().Labels().Get("job"))
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestEndedSeriesEach checks which selected refs of a written-out partition
// count as ended before a range, across several series-times chunks: known
// and older than the range; not a series without a recorded time (0), nor
// one whose chunk has no key.
func TestEndedSeriesEach(t *testing.T) {
	const part = 7_200_000
	refs := []uint32{0, 5, 1023, 1024, 1030, 2050, 4100}
	e := newEndedSeries(part, refs)
	if want := []uint32{0, 1, 2, 4}; !slices.Equal(e.chunks, want) {
		t.Fatalf("chunks %v, want %v", e.chunks, want)
	}
	at := func(newest int64) uint32 { return uint32(newest - part + 1) }
	e.times[0] = make([]uint32, timesChunk)
	e.times[0][0], e.times[0][5], e.times[0][1023] = at(part+100), 0, at(part+500)
	e.times[1] = make([]uint32, 7) // the chunk's later series came after its last write
	e.times[1][0] = at(part + 499)
	// chunk 2 (ref 2050) has no key
	e.times[3] = make([]uint32, 5)
	e.times[3][4] = at(part)
	var got []uint32
	e.each(part+500, func(j int) { got = append(got, refs[j]) })
	if want := []uint32{0, 1024, 4100}; !slices.Equal(got, want) {
		t.Fatalf("ended before the range: refs %v, want %v", got, want)
	}
}

// TestSeriesAPIOnReaderOfOpenPartition asks a reader's series API for
// ranges after a series stopped, in a partition the writer still has open:
// the reader's followed series know the newest time of the head log's
// samples it applied, and the partition's stored newest times tell about
// what the writer wrote out, also once the writer truncated its log.
func TestSeriesAPIOnReaderOfOpenPartition(t *testing.T) {
	ctx := context.Background()
	w, b := openMemDB(t, DefaultOptions())
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	write := func(from, to int64) { writeRunningAndStopped(t, w, base, from, to) }
	write(0, 20)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	write(20, 25) // in the head log only
	r := openTestReader(t, b, DefaultOptions(), nil)
	defer r.Close()
	check := func(where string, end int64) {
		t.Helper()
		for _, c := range []struct {
			mint int64
			want []string
		}{
			{base, []string{"running", "stopped"}},
			{base + 9*60_000, []string{"running", "stopped"}},
			{base + 9*60_000 + 1, []string{"running"}},
			{base + 22*60_000, []string{"running"}}, // running's newest samples are in the log only
		} {
			if err := r.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := seriesAPIJobs(t, r, c.mint, base+end*60_000); !slices.Equal(got, c.want) {
				t.Fatalf("%s: series in [%d, %d] of the data: %v, want %v", where, (c.mint-base)/60_000, end, got, c.want)
			}
		}
	}
	check("written out, then in the log", 25)
	write(25, 30)
	if err := w.Flush(ctx); err != nil { // the log is truncated
		t.Fatal(err)
	}
	check("after the writer truncated its log", 30)
}

// The label APIs read only partitions with data in the range, as
// Prometheus reads only the blocks whose time bounds overlap it: a range
// before a partition's first sample or after its last lists nothing.
func TestLabelAPIsSkipPartitionsWithoutDataInRange(t *testing.T) {
	ctx := context.Background()
	db, b := openMemDB(t, DefaultOptions())
	p := time.Now().Truncate(2 * time.Hour).Add(-2 * time.Hour).UnixMilli()
	late := labels.FromStrings("__name__", "up", "job", "late")
	for i := int64(30); i < 40; i++ {
		appendFloats(t, db, late, tsample{p + i*60_000, 1})
	}
	check := func(where string, db *DB) {
		t.Helper()
		for _, c := range []struct {
			from, to int64 // minutes into the partition
			want     []string
		}{
			{0, 29, nil},
			{40, 119, nil},
			{0, 30, []string{"late"}},
			{39, 50, []string{"late"}},
		} {
			q, err := db.Querier(p+c.from*60_000, p+c.to*60_000)
			if err != nil {
				t.Fatal(err)
			}
			values, _, err := q.LabelValues(ctx, "job", nil)
			if err != nil {
				t.Fatal(err)
			}
			names, _, err := q.LabelNames(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			q.Close()
			wantNames := []string{"__name__", "job"}
			if c.want == nil {
				wantNames = nil
			}
			if !slices.Equal(values, c.want) || !slices.Equal(names, wantNames) {
				t.Fatalf("%s: minutes [%d, %d]: job values %v, names %v; want %v, %v", where, c.from, c.to, values, names, c.want, wantNames)
			}
		}
	}
	checkThroughWriteOut(t, db, b, check)
}
