package storage

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/storage/objstore"
)

// TestAppendLabels checks the label rules of Append, for a series met for
// the first time and for one the head holds already (found without a second
// check of its labels).
func TestAppendLabels(t *testing.T) {
	dup := labels.NewScratchBuilder(2)
	dup.Add("__name__", "up")
	dup.Add("job", "a")
	dup.Add("job", "b")
	up := labels.FromStrings("__name__", "up", "job", "a")

	for _, tc := range []struct {
		name string
		lset labels.Labels
		// stored is the series the sample lands in; empty: rejected as
		// ErrInvalidSeries.
		stored labels.Labels
	}{
		{"new series", labels.FromStrings("__name__", "up", "job", "b"), labels.FromStrings("__name__", "up", "job", "b")},
		{"known series", up, up},
		{"empty value is an absent label", labels.FromStrings("__name__", "up", "job", "a", "zone", ""), up},
		{"empty value of a new series", labels.FromStrings("__name__", "up", "job", "c", "zone", ""), labels.FromStrings("__name__", "up", "job", "c")},
		{"empty label set", labels.EmptyLabels(), labels.EmptyLabels()},
		{"only empty values", labels.FromStrings("job", ""), labels.EmptyLabels()},
		{"empty name", labels.FromStrings("", "x", "__name__", "up"), labels.EmptyLabels()},
		{"repeated name", dup.Labels(), labels.EmptyLabels()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := openMemDB(t, DefaultOptions())
			appendFloats(t, db, up, tsample{1000, 1})
			app := db.Appender(context.Background())
			_, err := app.Append(0, tc.lset, 2000, 2)
			if got, want := errors.Is(err, ErrInvalidSeries), tc.stored.IsEmpty(); got != want {
				t.Fatalf("Append(%s): error %v, want ErrInvalidSeries %v", tc.lset, err, want)
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			want := map[string][]tsample{up.String(): {{1000, 1}}}
			if !tc.stored.IsEmpty() {
				want[tc.stored.String()] = append(want[tc.stored.String()], tsample{2000, 2})
			}
			got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
			if len(got) != len(want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			compareResults(t, tc.name, got, want)
		})
	}
}

// TestAppendAliasedLabels appends from one label buffer rewritten for each
// series, as the remote-write receiver does: the head must keep copies.
func TestAppendAliasedLabels(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	var (
		sb   = labels.NewScratchBuilder(2)
		lset labels.Labels
	)
	jobs := []string{"a", "bb", "c", "dd"}
	for ts := int64(1); ts <= 3; ts++ {
		app := db.Appender(context.Background())
		for _, job := range jobs {
			sb.Reset()
			sb.Add("__name__", "up")
			sb.Add("job", job)
			sb.Overwrite(&lset)
			if _, err := app.Append(0, lset, ts*1000, float64(ts)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
	want := []tsample{{1000, 1}, {2000, 2}, {3000, 3}}
	for _, job := range jobs {
		key := labels.FromStrings("__name__", "up", "job", job).String()
		if !sameSamples(got[key], want) {
			t.Fatalf("%s: got %v, want %v (all: %v)", key, got[key], want, got)
		}
	}
	if len(got) != len(jobs) {
		t.Fatalf("got %d series, want %d: %v", len(got), len(jobs), got)
	}
}

// TestHeadPartHashCollision gives distinct series one labels hash.
func TestHeadPartHashCollision(t *testing.T) {
	p := newHeadPart(0, 1000)
	sets := []labels.Labels{
		labels.FromStrings("__name__", "a"),
		labels.FromStrings("__name__", "b"),
		labels.FromStrings("__name__", "c"),
	}
	const h = 42
	for i, lset := range sets {
		if s := p.get(h, lset); s != nil {
			t.Fatalf("%s found before it was created", lset)
		}
		s, err := p.create(h, lset, 0)
		if err != nil {
			t.Fatal(err)
		}
		if s.ref != uint32(i) {
			t.Fatalf("%s: ref %d, want %d", lset, s.ref, i)
		}
	}
	for i, lset := range sets {
		s := p.get(h, lset)
		if s == nil || s.ref != uint32(i) || !labels.Equal(s.lset(), lset) {
			t.Fatalf("get(%s) = %v, want ref %d", lset, s, i)
		}
		if again, err := p.create(h, lset, 0); err != nil || again != s {
			t.Fatalf("create(%s) again = %v, %v; want the series it holds", lset, again, err)
		}
		if got := p.idx.Labels(uint32(i)); !labels.Equal(got, lset) {
			t.Fatalf("index labels of ref %d = %s, want %s", i, got, lset)
		}
	}
	if s := p.get(h, labels.FromStrings("__name__", "d")); s != nil {
		t.Fatalf("found a series never created: %s", s.lset())
	}
}

// TestIngestAppenderReuse runs requests one after another, committed and
// rolled back, so that each reuses the pending buffer of the one before: no
// sample of one request may reach another.
func TestIngestAppenderReuse(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	lsets := []labels.Labels{
		labels.FromStrings("__name__", "up", "job", "a"),
		labels.FromStrings("__name__", "up", "job", "b"),
		labels.FromStrings("__name__", "up", "job", "c"),
	}
	want := map[string][]tsample{}
	for i := range 20 {
		ts := int64(i+1) * 1000
		commit := i%3 != 1
		n := 1 + i%len(lsets) // requests of different sizes
		app := db.IngestAppender(context.Background())
		for _, lset := range lsets[:n] {
			if _, err := app.Append(0, lset, 0, ts, float64(i)); err != nil {
				t.Fatal(err)
			}
			if commit {
				want[lset.String()] = append(want[lset.String()], tsample{ts, float64(i)})
			}
		}
		var err error
		if commit {
			err = app.Commit()
		} else {
			err = app.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	compareResults(t, t.Name(), got, want)
}

// TestIngestAppenderExpectsItsLog: an ingest appender tells the WAL its
// record is on its way from the moment it opens until it commits or rolls
// back, so the WAL object being filled goes as soon as every open appender
// has joined it (lsm.Options.WALMinInterval) and not before: here the flush
// interval is an hour, so a commit returns only through that early path.
func TestIngestAppenderExpectsItsLog(t *testing.T) {
	ctx := context.Background()
	lopts := testLSMOptions()
	lopts.WALFlushInterval = time.Hour
	lopts.WALMinInterval = time.Millisecond
	db, err := openOn(ctx, objstore.NewMemoryBucket(), "tsdb", DefaultOptions(), lopts, nil, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expected := func() int { return db.w.Status().ExpectedLogRecords }

	empty := db.IngestAppender(ctx)
	idle := db.IngestAppender(ctx)
	app := db.IngestAppender(ctx)
	if n := expected(); n != 3 {
		t.Fatalf("%d records expected with three appenders open, want 3", n)
	}
	if err := empty.Commit(); err != nil {
		t.Fatal(err)
	}
	lset := labels.FromStrings("__name__", "up", "job", "a")
	if _, err := app.Append(0, lset, 0, 1000, 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Commit() }()
	// The commit appends its record and waits: the idle appender may still
	// bring one. Its rollback lets the object go.
	if err := idle.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("commit still waiting a minute after every other appender finished")
	}
	if n := expected(); n != 0 {
		t.Fatalf("%d records expected after every appender finished, want 0", n)
	}
	compareResults(t, t.Name(), queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")),
		map[string][]tsample{lset.String(): {{1000, 1}}})
}

// TestIngestAppenderResolveSeries looks series up in a batch and appends by
// the refs it gave, and by refs that do not match their labels, which must
// not send a sample to another series.
func TestIngestAppenderResolveSeries(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	a := labels.FromStrings("__name__", "up", "job", "a")
	b := labels.FromStrings("__name__", "up", "job", "b")
	c := labels.FromStrings("__name__", "up", "job", "c") // new in the second request
	appendFloats(t, db, a, tsample{1000, 1})
	appendFloats(t, db, b, tsample{1000, 1})

	app := db.IngestAppender(context.Background())
	lsets := []labels.Labels{a, c, b, labels.FromStrings("__name__", "up", "job", "a", "zone", "")}
	refs := make([]promstorage.SeriesRef, len(lsets))
	app.ResolveSeries(lsets, []int64{2000, 2000, 2000, 2000}, refs)
	if refs[0] == 0 || refs[2] == 0 || refs[0] == refs[2] {
		t.Fatalf("refs of known series: %v, want two distinct non-zero", refs)
	}
	if refs[1] != 0 || refs[3] != 0 {
		t.Fatalf("refs %v: want 0 for a new series and for labels with an empty value", refs)
	}
	for i, lset := range lsets[:3] {
		ref, err := app.Append(refs[i], lset, 0, 2000, 2)
		if err != nil {
			t.Fatal(err)
		}
		if refs[i] != 0 && ref != refs[i] {
			t.Fatalf("Append(%d, %s) returned ref %d", refs[i], lset, ref)
		}
		refs[i] = ref
	}
	// The ref of a with the labels of b: the labels win.
	if _, err := app.Append(refs[0], b, 0, 3000, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Append(refs[2], b, 0, 4000, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Append(99, c, 0, 3000, 3); err != nil { // a ref never given
		t.Fatal(err)
	}
	got := commitAndQueryUp(t, db, app)
	want := map[string][]tsample{
		a.String(): {{1000, 1}, {2000, 2}},
		b.String(): {{1000, 1}, {2000, 2}, {3000, 3}, {4000, 4}},
		c.String(): {{2000, 2}, {3000, 3}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	compareResults(t, t.Name(), got, want)
}

// commitAndQueryUp commits app and returns every sample of the series of
// the metric up.
func commitAndQueryUp(t *testing.T, db *DB, app *IngestAppender) map[string][]tsample {
	t.Helper()
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	return queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
}

// TestIngestAppenderStaleRef reuses a label buffer, as the remote-write
// handler does between batches: a ref given before the last ResolveSeries,
// whose labels were rewritten in place since, must not send the sample to
// the ref's series.
func TestIngestAppenderStaleRef(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	a := labels.FromStrings("__name__", "up", "job", "a")
	b := labels.FromStrings("__name__", "up", "job", "b")
	appendFloats(t, db, a, tsample{1000, 1})
	appendFloats(t, db, b, tsample{1000, 1})

	// shared holds the labels of one series at a time: Overwrite reuses its
	// memory (with stringlabels; other builds copy, and never alias).
	sb := labels.NewScratchBuilder(2)
	sb.Add("__name__", "up")
	sb.Add("job", "a")
	var shared labels.Labels
	sb.Overwrite(&shared)

	app := db.IngestAppender(context.Background())
	refs := make([]promstorage.SeriesRef, 1)
	app.ResolveSeries([]labels.Labels{shared}, []int64{2000}, refs)
	if refs[0] == 0 {
		t.Fatal("no ref for a known series")
	}
	refA := refs[0]
	if _, err := app.Append(refA, shared, 0, 2000, 2); err != nil {
		t.Fatal(err)
	}
	// The next batch: the same buffer now says job="b".
	sb.Reset()
	sb.Add("__name__", "up")
	sb.Add("job", "b")
	sb.Overwrite(&shared)
	app.ResolveSeries([]labels.Labels{labels.FromStrings("__name__", "up", "job", "c")}, []int64{3000}, refs)
	if _, err := app.Append(refA, shared, 0, 3000, 3); err != nil {
		t.Fatal(err)
	}
	got := commitAndQueryUp(t, db, app)
	want := map[string][]tsample{
		a.String(): {{1000, 1}, {2000, 2}},
		b.String(): {{1000, 1}, {3000, 3}},
	}
	compareResults(t, t.Name(), got, want)
}

// TestSeriesTable fills the dictionary through several growths, with hashes
// that collide in full, in their low bits and in the 32 bits a slot keeps,
// and checks every lookup.
func TestSeriesTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		hash func(i int) uint64
	}{
		{"distinct", func(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 }},
		{"same low bits", func(i int) uint64 { return uint64(i) << 40 }},
		{"same folded bits", func(i int) uint64 { return uint64(i)<<32 | uint64(i) }},
		{"full collisions", func(i int) uint64 { return uint64(i % 7) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newHeadPart(0, 1000)
			const n = 3000
			lsets := make([]labels.Labels, n)
			for i := range lsets {
				lsets[i] = labels.FromStrings("__name__", "m", "i", strconv.Itoa(i))
				if ref := p.dict.get(tc.hash(i), lsets[i], p.idx); ref >= 0 {
					t.Fatalf("series %d found before it was added", i)
				}
				s, err := p.create(tc.hash(i), lsets[i], 0)
				if err != nil || s.ref != uint32(i) {
					t.Fatalf("create(series %d) = %v, %v", i, s, err)
				}
			}
			if tab := &p.dict; tab.n != n || len(tab.slots)*3 < n*4 {
				t.Fatalf("%d series in %d slots", tab.n, len(tab.slots))
			}
			for i, lset := range lsets {
				got := p.dict.get(tc.hash(i), lset, p.idx)
				if got != int64(i) || !labels.Equal(p.series[got].lset(), lset) {
					t.Fatalf("get(series %d) = %d", i, got)
				}
				if first := p.dict.first(tc.hash(i)); first < 0 || p.dict.get(tc.hash(i), p.series[first].lset(), p.idx) != first {
					t.Fatalf("first(hash of series %d) = %d", i, first)
				}
			}
			if ref := p.dict.get(tc.hash(5), labels.FromStrings("__name__", "absent"), p.idx); ref >= 0 {
				t.Fatalf("found a series never added: %s", p.series[ref].lset())
			}
		})
	}
}

// TestHeadSeriesLabels checks that a head series' labels, which only the
// partition's index holds, come back intact after the buffers they were
// created from are overwritten, and that a ref given for labels is trusted
// while other labels are checked.
func TestHeadSeriesLabels(t *testing.T) {
	p := newHeadPart(0, 1000)
	buf := []byte("node_cpu_seconds_total")
	b := labels.NewScratchBuilder(2)
	b.Add("__name__", unsafe.String(&buf[0], len(buf)))
	b.Add("cpu", "0")
	lset := b.Labels()
	want := lset.Copy()
	s, err := p.create(lset.Hash(), lset, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXXXXXXXXXXXXXXX")
	if got := s.lset(); !labels.Equal(got, want) {
		t.Fatalf("labels after the caller's buffer changed: %s, want %s", got, want)
	}
	if !s.is(want) || s.is(labels.FromStrings("__name__", "node_cpu_seconds_total")) || s.is(labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", "1")) {
		t.Fatal("is compares labels wrongly")
	}
	var lb labels.ScratchBuilder
	if got := s.labelSet(&lb); !labels.Equal(got, want) {
		t.Fatalf("labelSet = %s, want %s", got, want)
	}
}

// TestStartTimeZeroInsideRequest sends, in one request, a series' sample and
// then a later one whose start time is the first one's time, also with
// another series between them: the zero sample must not replace the first
// sample, as Prometheus stores a created-timestamp zero only before the
// series' newest sample.
func TestStartTimeZeroInsideRequest(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	a := labels.FromStrings("__name__", "c_total", "job", "a")
	b := labels.FromStrings("__name__", "c_total", "job", "b")
	app := db.IngestAppender(context.Background())
	for _, s := range []struct {
		lset  labels.Labels
		st, t int64
		v     float64
	}{
		{a, 500, 1000, 5},
		{b, 0, 1000, 1},
		{a, 1000, 2000, 7}, // start time at the previous sample: no zero
		{a, 2500, 3000, 2}, // a reset: a zero at 2500
	} {
		if _, err := app.Append(0, s.lset, s.st, s.t, s.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "job", "a"))[a.String()]
	want := []tsample{{500, 0}, {1000, 5}, {2000, 7}, {2500, 0}, {3000, 2}}
	if !sameSamples(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestQueuedAppendable commits through the queued appendable while the WAL
// would not write its next object for an hour: the commit returns at once,
// queries see the samples, and the next WAL object makes them durable.
func TestQueuedAppendable(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	opts.WriteTimeout = 0
	lopts := testLSMOptions()
	lopts.WALFlushInterval = time.Hour
	db, err := openOn(ctx, b, "tsdb", opts, lopts, nil, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lset := labels.FromStrings("__name__", "recorded")
	app := db.QueuedAppendable().AppenderV2(ctx)
	if _, err := app.Append(0, lset, 0, 1000, 1, nil, nil, promstorage.AppendV2Options{}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "recorded")
	if got := queryFloats(t, db, math.MinInt64, math.MaxInt64, m)[lset.String()]; !sameSamples(got, []tsample{{1000, 1}}) {
		t.Fatalf("writer sees %v", got)
	}
	if err := db.w.FlushWAL(ctx); err != nil {
		t.Fatal(err)
	}
	r := openTestReader(t, b, opts, nil)
	defer r.Close()
	if got := queryFloats(t, r, math.MinInt64, math.MaxInt64, m)[lset.String()]; !sameSamples(got, []tsample{{1000, 1}}) {
		t.Fatalf("the WAL holds %v", got)
	}
}
