package storage

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/lsm"
)

// series returns samples every step from t0 to t1 inclusive, value = t/1000.
func seriesSamples(t0, t1, step int64) []tsample {
	var out []tsample
	for t := t0; t <= t1; t += step {
		out = append(out, tsample{t, float64(t) / 1000})
	}
	return out
}

func inRange(ss []tsample, mint, maxt int64) []tsample {
	var out []tsample
	for _, s := range ss {
		if s.t >= mint && s.t <= maxt {
			out = append(out, s)
		}
	}
	return out
}

// checkQuery checks that a query of [mint, maxt] returns exactly the series
// of want that have samples in range, with those samples: a series without
// samples in range is not returned at all (it was skipped before its blocks
// were read, or its blocks were read and held none).
func checkQuery(t *testing.T, what string, db *DB, mint, maxt int64, want map[string][]tsample) {
	t.Helper()
	got := queryFloats(t, db, mint, maxt, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	for k, ss := range want {
		w := inRange(ss, mint, maxt)
		g, ok := got[k]
		if len(w) == 0 {
			if ok && len(g) > 0 {
				t.Fatalf("%s [%d, %d]: series %s has %v, want none", what, mint, maxt, k, g)
			}
			continue
		}
		if !sameSamples(g, w) {
			t.Fatalf("%s [%d, %d]: series %s:\n got  %v\n want %v", what, mint, maxt, k, g, w)
		}
	}
}

// TestQueryRangeEdges queries ranges that start and end on, just before and
// just after samples, partition starts and ends and series ends, with the
// data in the head, flushed, in closed partitions and after a restart.
func TestQueryRangeEdges(t *testing.T) {
	const part = 2 * 3600 * 1000
	a := labels.FromStrings("__name__", "m", "s", "a")     // spans two partitions
	ended := labels.FromStrings("__name__", "m", "s", "e") // stops early in the first
	late := labels.FromStrings("__name__", "m", "s", "l")  // starts late in the second
	want := map[string][]tsample{
		a.String():     seriesSamples(0, part+30*60*1000, 15000),
		ended.String(): seriesSamples(0, 20*60*1000, 15000),
		late.String():  seriesSamples(part+10*60*1000, part+30*60*1000, 15000),
	}
	edges := []int64{math.MinInt64, -1, 0, 1, 14999, 15000, 20 * 60 * 1000, 20*60*1000 + 1, part - 15000, part - 1, part,
		part + 1, part + 10*60*1000 - 1, part + 10*60*1000, part + 30*60*1000, part + 30*60*1000 + 1, 2 * part, math.MaxInt64}
	checkAll := func(t *testing.T, what string, db *DB) {
		t.Helper()
		for i, mint := range edges {
			for _, maxt := range edges[i:] {
				checkQuery(t, what, db, mint, maxt, want)
			}
		}
	}
	for _, wal := range []bool{true, false} {
		t.Run(map[bool]string{true: "wal=on", false: "wal=off"}[wal], func(t *testing.T) {
			opts := DefaultOptions()
			opts.WAL = wal
			opts.Retention = 0
			db, b := openMemDB(t, opts)
			appendFloats(t, db, ended, want[ended.String()]...)
			appendFloats(t, db, a, inRange(want[a.String()], 0, part-1)...)
			if err := db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			appendFloats(t, db, a, inRange(want[a.String()], part, math.MaxInt64)...)
			appendFloats(t, db, late, want[late.String()]...)
			checkAll(t, "head", db)
			if err := db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkAll(t, "flushed", db)
			db = reopen(t, db, b, opts)
			checkAll(t, "restarted", db)
			if err := db.flushHead(context.Background(), closeAll); err != nil {
				t.Fatal(err)
			}
			checkAll(t, "closed", db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEndedSeriesSkipped checks that a head series that ended before a
// query's range is not part of the result, and that after a restart (its
// samples only in sample blocks) the series that did not end before the
// range still are: their newest times were persisted.
func TestEndedSeriesSkipped(t *testing.T) {
	opts := DefaultOptions()
	opts.Retention = 0
	db, b := openMemDB(t, opts)
	ended := labels.FromStrings("__name__", "m", "s", "ended")
	recent := labels.FromStrings("__name__", "m", "s", "recent")
	appendFloats(t, db, ended, seriesSamples(0, 600_000, 15000)...)
	appendFloats(t, db, recent, seriesSamples(0, 1_800_000, 15000)...)
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
	check := func(what string) {
		t.Helper()
		got := queryFloats(t, db, 1_500_000, 2_000_000, m)
		if _, ok := got[ended.String()]; ok {
			t.Fatalf("%s: the series that ended before the range was selected", what)
		}
		if w := seriesSamples(1_500_000, 1_800_000, 15000); !sameSamples(got[recent.String()], w) {
			t.Fatalf("%s: recent series %v, want %v", what, got[recent.String()], w)
		}
		// The ended series is still found where its samples are.
		got = queryFloats(t, db, 600_000, 600_000, m)
		if w := []tsample{{600_000, 600}}; !sameSamples(got[ended.String()], w) {
			t.Fatalf("%s: ended series at its last sample %v, want %v", what, got[ended.String()], w)
		}
	}
	check("head")
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("flushed")
	db = reopen(t, db, b, opts)
	defer db.Close()
	p := db.head.openPart(0)
	if p == nil {
		t.Fatal("partition 0 not open after the restart")
	}
	for _, c := range []struct {
		lset labels.Labels
		want int64
	}{{ended, 600_000}, {recent, 1_800_000}} {
		s := p.get(c.lset.Hash(), c.lset)
		s.lock()
		got := p.newestLocked(s)
		s.unlock()
		if got != c.want {
			t.Fatalf("after restart: newest time of %s is %d, want %d", c.lset, got, c.want)
		}
	}
	check("restarted")
	// A sample older than the newest persisted one is out of order, not a
	// new newest time.
	appendFloats(t, db, recent, tsample{1_900_000, 1})
	check2 := queryFloats(t, db, 1_850_000, 2_000_000, m)
	if w := []tsample{{1_900_000, 1}}; !sameSamples(check2[recent.String()], w) {
		t.Fatalf("after a new sample: %v, want %v", check2[recent.String()], w)
	}
}

// TestPartitionBoundsPersisted checks the data bounds a partition's
// registry entry records, that they widen with backfilled and out-of-order
// samples and survive a restart, and that a query of a range outside them
// skips the partition.
func TestPartitionBoundsPersisted(t *testing.T) {
	const part = 2 * 3600 * 1000
	opts := DefaultOptions()
	opts.Retention = 0
	opts.OutOfOrderWindow = 3 * time.Hour
	db, b := openMemDB(t, opts)
	x := labels.FromStrings("__name__", "m", "s", "x")
	appendFloats(t, db, x, seriesSamples(30*60*1000, 60*60*1000, 15000)...)
	appendFloats(t, db, x, seriesSamples(part, part+60*60*1000, 15000)...)
	entry := func(start int64) partitionMeta {
		t.Helper()
		v, ok, err := db.lsm.Get(context.Background(), registryKey(start))
		if err != nil || !ok {
			t.Fatalf("registry entry of %d: %v, found %v", start, err, ok)
		}
		m, err := decodePartitionMeta(v)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	wantBounds := func(what string, start, lo, hi int64) {
		t.Helper()
		if m := entry(start); m.dataMin != lo || m.dataMax != hi {
			t.Fatalf("%s: partition %d bounds [%d, %d], want [%d, %d]", what, start, m.dataMin, m.dataMax, lo, hi)
		}
	}
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		t.Fatal(err)
	}
	wantBounds("closed", 0, 30*60*1000, 60*60*1000)
	wantBounds("closed", part, part, part+60*60*1000)
	parts, err := db.partitions(context.Background(), 0, 20*60*1000)
	if err != nil || len(parts) != 1 || db.mayHold(parts[0], 0, 20*60*1000) {
		t.Fatalf("a range before the data: partitions %+v (%v), want one the query skips", parts, err)
	}
	// A backfilled sample before the partition's data and an out-of-order
	// one after it widen the bounds.
	appendFloats(t, db, x, tsample{10 * 60 * 1000, -1}, tsample{90 * 60 * 1000, -2})
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		t.Fatal(err)
	}
	wantBounds("backfilled", 0, 10*60*1000, 90*60*1000)
	db = reopen(t, db, b, opts)
	defer db.Close()
	wantBounds("restarted", 0, 10*60*1000, 90*60*1000)
	got := queryFloats(t, db, 0, 20*60*1000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	if w := []tsample{{10 * 60 * 1000, -1}}; !sameSamples(got[x.String()], w) {
		t.Fatalf("backfilled sample: %v, want %v", got[x.String()], w)
	}
	got = queryFloats(t, db, 80*60*1000, part-1, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	if w := []tsample{{90 * 60 * 1000, -2}}; !sameSamples(got[x.String()], w) {
		t.Fatalf("out-of-order sample: %v, want %v", got[x.String()], w)
	}
	// A reopened partition starts from its recorded bounds.
	appendFloats(t, db, x, tsample{100 * 60 * 1000, -3})
	p := db.head.openPart(0)
	if p == nil {
		t.Fatal("partition 0 not reopened")
	}
	if lo, hi, ok := p.bounds(); !ok || lo != 10*60*1000 || hi != 100*60*1000 {
		t.Fatalf("reopened partition bounds [%d, %d] %v, want [%d, %d]", lo, hi, ok, 10*60*1000, 100*60*1000)
	}
}

// TestDeleteKeepsRangeReads deletes the newest samples of a series and the
// whole of another, and checks queries at the range edges before and after
// a restart.
func TestDeleteKeepsRangeReads(t *testing.T) {
	opts := DefaultOptions()
	opts.Retention = 0
	db, b := openMemDB(t, opts)
	x := labels.FromStrings("__name__", "m", "s", "x")
	y := labels.FromStrings("__name__", "m", "s", "y")
	appendFloats(t, db, x, seriesSamples(0, 1_200_000, 15000)...)
	appendFloats(t, db, y, seriesSamples(0, 1_200_000, 15000)...)
	if err := db.Delete(context.Background(), 900_000, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "s", "x")); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(context.Background(), math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "s", "y")); err != nil {
		t.Fatal(err)
	}
	want := map[string][]tsample{x.String(): seriesSamples(0, 885_000, 15000), y.String(): nil}
	for _, what := range []string{"deleted", "restarted"} {
		for _, r := range [][2]int64{{0, 1_200_000}, {885_000, 885_000}, {885_001, 1_200_000}, {900_000, 900_000}, {math.MinInt64, math.MaxInt64}} {
			checkQuery(t, what, db, r[0], r[1], want)
		}
		db = reopen(t, db, b, opts)
	}
	_ = db.Close()
}

// TestFormatVersionChecked opens data whose settings say format version 1.
func TestFormatVersionChecked(t *testing.T) {
	opts := DefaultOptions()
	db, b := openMemDB(t, opts)
	appendFloats(t, db, labels.FromStrings("__name__", "x"), tsample{1000, 1})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := lsm.Open(context.Background(), b, "tsdb", LSMOptions(opts, testLSMOptions()), LSMComponents(lsm.Components{}))
	if err != nil {
		t.Fatal(err)
	}
	var batch lsm.Batch
	batch.Put([]byte{keySettings}, []byte{1, 0x80, 0xb5, 0x18}) // version 1, 2 h
	if err := w.Write(context.Background(), &batch, lsm.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openOn(context.Background(), b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err == nil || !strings.Contains(err.Error(), "format version 1") {
		t.Fatalf("open of version 1 data: %v, want an error naming format version 1", err)
	}
}

// TestSampleReadsSkipBlocks: a partition whose sample keys hold one block
// per head flush (before compaction merges them) answers every range
// exactly, in the head and closed, and a query reads only the blocks that
// may hold samples in its range.
func TestSampleReadsSkipBlocks(t *testing.T) {
	const (
		part    = 2 * 3600 * 1000
		quarter = part / 4
	)
	opts := DefaultOptions()
	opts.WAL = false
	opts.Retention = 0
	db, _ := openMemDB(t, opts)
	want := map[string][]tsample{}
	var lsets []labels.Labels
	for _, s := range []string{"a", "b", "c"} {
		l := labels.FromStrings("__name__", "m", "s", s)
		lsets = append(lsets, l)
		want[l.String()] = seriesSamples(0, part-15000, 15000)
	}
	// Four flushes, a quarter of the partition each.
	for q := range int64(4) {
		for _, l := range lsets {
			appendFloats(t, db, l, inRange(want[l.String()], q*quarter, (q+1)*quarter-1)...)
		}
		if err := db.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// blocksRead returns how many stored blocks a Select of [mint, maxt]
	// gave each series, summed.
	blocksRead := func(mint, maxt int64) int {
		t.Helper()
		q, err := db.Querier(mint, maxt)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		n := 0
		for ss.Next() {
			for _, seg := range ss.At().(*qSeries).segs {
				n += len(seg.srcs)
			}
		}
		if err := ss.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	edges := []int64{math.MinInt64, 0, quarter - 15000, quarter - 1, quarter, 2*quarter - 1, 3 * quarter, part - 15000 - 5*60*1000, part - 15000, part, math.MaxInt64}
	for _, when := range []string{"open", "closed"} {
		if when == "closed" {
			if err := db.flushHead(context.Background(), closeAll); err != nil {
				t.Fatal(err)
			}
		}
		for i, mint := range edges {
			for _, maxt := range edges[i:] {
				checkQuery(t, when, db, mint, maxt, want)
			}
		}
		// An alerting rule's [5m] at the end reads the last flush's block
		// of each series; the whole partition all four.
		if n := blocksRead(part-15000-5*60*1000, part-15000); n != len(lsets) {
			t.Errorf("%s: [5m] at the end read %d blocks, want %d (one a series)", when, n, len(lsets))
		}
		if n := blocksRead(quarter-15000, quarter); n != 2*len(lsets) {
			t.Errorf("%s: a range across two flushes read %d blocks, want %d", when, n, 2*len(lsets))
		}
		if n := blocksRead(0, part); n != 4*len(lsets) {
			t.Errorf("%s: the whole partition read %d blocks, want %d", when, n, 4*len(lsets))
		}
	}
}

// TestShortRangeReadsItsFlush: over a closed partition whose sample keys
// hold one block per head flush, in a table of each flush, a query of the
// last minutes reads from the object store the table blocks of the last
// flush only (sampleInterval, lsm.Iterator.SetInterval), not those of every
// flush, and answers exactly.
func TestShortRangeReadsItsFlush(t *testing.T) {
	const (
		part    = 2 * 3600 * 1000
		quarter = part / 4
		n       = 300
	)
	opts := coldOptions()
	db, b := openMemDB(t, opts)
	rng := rand.New(rand.NewPCG(3, 4))
	var lsets []labels.Labels
	want := map[string][]tsample{}
	for i := range n {
		l := labels.FromStrings("__name__", "m", "s", strconv.Itoa(i))
		lsets = append(lsets, l)
		// Values that do not compress to nothing: a few bytes a sample,
		// so that a flush's blocks fill many table blocks.
		ss := seriesSamples(int64(i), part-15000+int64(i), 15000)
		for j := range ss {
			ss[j].v = float64(rng.IntN(1_000_000)) / 100
		}
		want[l.String()] = ss
	}
	for q := range int64(4) {
		for _, l := range lsets {
			appendFloats(t, db, l, inRange(want[l.String()], q*quarter, (q+1)*quarter-1)...)
		}
		if err := db.flushHead(context.Background(), closeOld); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cb := newCountingBucket(b)
	r := openTestReader(t, cb, opts, nil)
	defer r.Close()
	read := func(mint, maxt int64) int64 {
		t.Helper()
		cb.reset()
		checkQuery(t, "closed", r, mint, maxt, want)
		return cb.dataBytes.Load()
	}
	all := read(0, part-1)
	short := read(part-5*60*1000, part-1)
	// Labels and postings are read either way; the sample blocks of three
	// of the four flushes are not.
	if short*2 > all {
		t.Errorf("[5m] at the end read %d bytes of data blocks, the whole partition %d", short, all)
	}
	t.Logf("data bytes read: whole partition %d, [5m] at the end %d", all, short)
}
