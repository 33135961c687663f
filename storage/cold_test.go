package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// coldBase is the start of the cold data sets: a partition boundary.
var coldBase = int64(1_700_000_000_000) / (2 * 3600 * 1000) * (2 * 3600 * 1000)

// coldOptions are the settings of the cold data sets and the DBs that read
// them: no WAL, as they are written out and closed, and no retention, as
// their samples are years old.
func coldOptions() Options {
	o := DefaultOptions()
	o.WAL = false
	o.Retention = 0
	return o
}

// coldSpec is a data set written, flushed into closed partitions,
// compacted and closed, so that a DB opened on it reads everything from the
// object store.
type coldSpec struct {
	series   int           // series of metric x (and as many of metric y)
	span     time.Duration // from coldBase
	interval time.Duration // between samples of one series
}

var (
	coldMu      sync.Mutex
	coldBuckets = map[coldSpec]*objstore.MemoryBucket{}
)

// coldBucket returns the bucket holding spec's data set, built once per
// process. Series x{job, instance} and y{job, instance} are written scrape by
// scrape, so that the refs of x and y alternate in every partition as the
// metrics of one target do.
func coldBucket(t testing.TB, spec coldSpec) *objstore.MemoryBucket {
	t.Helper()
	coldMu.Lock()
	defer coldMu.Unlock()
	if b := coldBuckets[spec]; b != nil {
		return b
	}
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	db := openTestDB(t, b, coldOptions())
	lsets := make([]labels.Labels, 0, 2*spec.series)
	for i := range spec.series {
		job, inst := "job-"+strconv.Itoa(i%10), "host-"+strconv.Itoa(i)
		lsets = append(lsets,
			labels.FromStrings("__name__", "x", "instance", inst, "job", job),
			labels.FromStrings("__name__", "y", "instance", inst, "job", job))
	}
	// Counters growing by a random amount each scrape, as request counts
	// do: about 2 bytes a sample in sample blocks.
	rng := rand.New(rand.NewPCG(uint64(spec.series), 1))
	vals := make([]float64, len(lsets))
	step := spec.interval.Milliseconds()
	for ts := coldBase; ts < coldBase+spec.span.Milliseconds(); ts += step {
		app := db.Appender(ctx)
		for i, l := range lsets {
			vals[i] += float64(rng.IntN(1000))
			if _, err := app.Append(0, l, ts, vals[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := db.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.w.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	coldBuckets[spec] = b
	return b
}

// countingBucket counts object-store reads and their bytes, telling reads
// of a table's tail (footer, index, filter: what opening a table reads)
// from the rest (data blocks).
type countingBucket struct {
	objstore.Bucket
	requests, dataBytes, metaBytes atomic.Int64

	mu    sync.Mutex
	sizes map[string]int64
}

func newCountingBucket(b objstore.Bucket) *countingBucket {
	return &countingBucket{Bucket: b, sizes: map[string]int64{}}
}

type countingReadCloser struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReadCloser) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	c.requests.Add(1)
	rc, err := c.Bucket.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingReadCloser{rc, &c.metaBytes}, nil
}

func (c *countingBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	c.requests.Add(1)
	c.mu.Lock()
	size, ok := c.sizes[name]
	c.mu.Unlock()
	if !ok {
		a, err := c.Bucket.Attributes(ctx, name)
		if err != nil {
			return nil, err
		}
		size = a.Size
		c.mu.Lock()
		c.sizes[name] = size
		c.mu.Unlock()
	}
	rc, err := c.Bucket.GetRange(ctx, name, off, length)
	if err != nil {
		return nil, err
	}
	n := &c.dataBytes
	if off+length >= size {
		n = &c.metaBytes
	}
	return countingReadCloser{rc, n}, nil
}

func (c *countingBucket) reset() {
	c.requests.Store(0)
	c.dataBytes.Store(0)
	c.metaBytes.Store(0)
}

// coldDB opens a read-only DB with an empty cache of its own on the data set
// in inner, through a fault bucket adding latency to every request. The
// cache has a RAM tier of cacheBytes (0: no cache).
func coldDB(t testing.TB, inner objstore.Bucket, latency time.Duration, cacheBytes int64) (*DB, *objstore.FaultBucket, *countingBucket) {
	t.Helper()
	cb := newCountingBucket(inner)
	fb := objstore.NewFaultBucket(cb)
	fb.SetLatency(latency)
	var c cache.Cache
	if cacheBytes > 0 {
		c = newTestCache(t, cacheBytes)
	}
	ropts := lsm.DefaultReaderOptions()
	ropts.PollInterval = 0
	db, err := openReadOnlyOn(context.Background(), fb, "tsdb", coldOptions(), ropts, c, Components{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fb.ResetCounts()
	cb.reset()
	return db, fb, cb
}

// coldCacheBytes is the RAM tier coldDB gets in the cache=true and
// cache=false runs of a test.
func coldCacheBytes(cached bool) int64 {
	if cached {
		return 64 << 20
	}
	return 0
}

func getRequests(fb *objstore.FaultBucket) int64 {
	return fb.Requests(objstore.OpGet) + fb.Requests(objstore.OpGetRange)
}

// neededBytes is the size (keys and values) of the LSM entries a query of
// metric name over the partitions in [mint, maxt] must read: the registry,
// the postings of the name, and the forward-index and sample entries of its
// series.
func neededBytes(t testing.TB, db *DB, name string, mint, maxt int64) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	count := func(k, v []byte) error { n += int64(len(k) + len(v)); return nil }
	if err := db.scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, count); err != nil {
		t.Fatal(err)
	}
	for part := db.partitionOf(mint); part <= maxt; part += db.partMs {
		pk := postingsKey(part, "__name__", name)
		v, ok, err := db.lsm.Get(ctx, pk)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		n += int64(len(pk) + len(v))
		bm, err := (&lsmIndex{db: db, part: part}).Postings(ctx, "__name__", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range bm.ToArray() {
			for _, k := range [][]byte{forwardKey(part, ref), samplesKey(part, ref)} {
				v, _, err := db.lsm.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				n += int64(len(k) + len(v))
			}
		}
	}
	return n
}

func TestColdHelpers(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 20, span: 4 * time.Hour, interval: time.Minute})
	db, fb, _ := coldDB(t, b, 0, 0)
	got := queryFloats(t, db, coldBase, coldBase+4*3600*1000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	wantCounts(t, "query", got, 20, 240)
	if getRequests(fb) == 0 {
		t.Fatal("a cold query made no object-store reads")
	}
}

func TestPlanRanges(t *testing.T) {
	seq := func(lo, hi, step uint32) []uint32 {
		var out []uint32
		for r := lo; r <= hi; r += step {
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		refs    []uint32
		freeGap uint32
		chunk   uint32
		want    []refRange
	}{
		{"empty", nil, 4, 100, nil},
		{"one", []uint32{7}, 4, 100, []refRange{{7, 7}}},
		{"dense", seq(0, 9, 1), 4, 100, []refRange{{0, 9}}},
		{"interleaved", seq(0, 18, 2), 4, 100, []refRange{{0, 18}}},
		{"gap over free gap", []uint32{1, 2, 10, 11}, 4, 100, []refRange{{1, 2}, {10, 11}}},
		{"gap at free gap", []uint32{1, 6}, 4, 100, []refRange{{1, 6}}},
		{"chunked", seq(0, 249, 1), 4, 100, []refRange{{0, 99}, {100, 199}, {200, 249}}},
		// 100 lone refs 10 apart: more ranges than maxRangesPerPart, so the
		// gaps are merged while the refs read stay within 3x those wanted.
		{"sparse merged within budget", seq(0, 990, 10), 4, 10000, nil},
		// 10000 apart: merging any gap would read far more than 3x.
		{"sparse beyond budget", seq(0, 990000, 10000), 4, 10000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planRanges(tc.refs, tc.freeGap, tc.chunk)
			if tc.name == "sparse beyond budget" {
				if len(got) != len(tc.refs) {
					t.Fatalf("got %d ranges, want one per ref (%d)", len(got), len(tc.refs))
				}
				return
			}
			if tc.name == "sparse merged within budget" {
				var span uint32
				for _, r := range got {
					span += r.hi - r.lo + 1
				}
				// Unmerged, the 100 ranges cost 5 refs each (the free gap + 1).
				if len(got) > maxRangesPerPart || span > rangeSpanBudget*5*uint32(len(tc.refs)) {
					t.Fatalf("got %d ranges over %d refs: want at most %d ranges and %d refs", len(got), span, maxRangesPerPart, rangeSpanBudget*5*len(tc.refs))
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("planRanges(%v) = %v, want %v", tc.refs, got, tc.want)
			}
		})
	}
	// Every ref is in exactly one range, whatever the input.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		refs := randomRefs(rng, 5000)
		got := planRanges(refs, uint32(rng.IntN(8)), uint32(rng.IntN(300)+1))
		i := 0
		for j, r := range got {
			if r.lo > r.hi || (j > 0 && r.lo <= got[j-1].hi) {
				t.Fatalf("ranges %v not disjoint and ordered", got)
			}
			for i < len(refs) && refs[i] <= r.hi {
				if refs[i] < r.lo {
					t.Fatalf("ref %d in no range of %v", refs[i], got)
				}
				i++
			}
		}
		if i != len(refs) {
			t.Fatalf("refs from %d on are in no range of %v", refs[i], got)
		}
	}
}

// randomRefs returns 1 to 500 distinct refs below n, sorted.
func randomRefs(rng *rand.Rand, n int) []uint32 {
	set := map[uint32]bool{}
	for range rng.IntN(500) + 1 {
		set[uint32(rng.IntN(n))] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// TestRangeReads: the reads of a partition's refs give each ref to exactly
// one read, whose [lo, hi) indexes the refs inside its key range, and no
// read is without refs.
func TestRangeReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		refs := randomRefs(rng, 20000)
		reads := rangeReads(7, subSamples, refs, uint32(rng.IntN(600)), uint32(rng.IntN(300)+1), false, func() func(int, []byte) error { return nil })
		next := 0
		for _, rd := range reads {
			if rd.lo != next || rd.hi <= rd.lo {
				t.Fatalf("read of %v indexes [%d, %d), want to start at %d with refs", rd.r, rd.lo, rd.hi, next)
			}
			for _, ref := range refs[rd.lo:rd.hi] {
				if ref < rd.r.lo || ref > rd.r.hi {
					t.Fatalf("ref %d given to the read of %v", ref, rd.r)
				}
			}
			next = rd.hi
		}
		if next != len(refs) {
			t.Fatalf("refs from index %d on are in no read", next)
		}
	}
}

// TestColdQueryRequestsBounded asks a cold DB (empty cache, or none) for
// every series of one metric in one partition and checks that the number of
// object-store reads does not grow with the number of series: the labels and
// sample blocks of N series are read with a few ranged reads, not N.
func TestColdQueryRequestsBounded(t *testing.T) {
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	for _, cached := range []bool{true, false} {
		for _, n := range []int{10, 100, 1000} {
			t.Run(fmt.Sprintf("cache=%v/series=%d", cached, n), func(t *testing.T) {
				b := coldBucket(t, coldSpec{series: n, span: 2 * time.Hour, interval: 4 * time.Minute})
				db, fb, _ := coldDB(t, b, time.Millisecond, coldCacheBytes(cached))
				got := queryFloats(t, db, coldBase, coldBase+2*3600*1000, x)
				wantCounts(t, "query", got, n, 30)
				reqs := getRequests(fb)
				t.Logf("%d object-store reads", reqs)
				if reqs > 12 {
					t.Fatalf("%d object-store reads for %d series, want at most 12", reqs, n)
				}
				// Warm: no reads at all.
				if cached {
					fb.ResetCounts()
					queryFloats(t, db, coldBase, coldBase+2*3600*1000, x)
					if r := getRequests(fb); r != 0 {
						t.Fatalf("a repeated query made %d object-store reads", r)
					}
				}
			})
		}
	}
}

// TestColdQueryPartitionsInParallel checks that a cold query over several
// partitions costs the round trips of one: with a latency far above the
// rest of the work, the query takes a few latencies, not a few per
// partition.
func TestColdQueryPartitionsInParallel(t *testing.T) {
	const latency = 40 * time.Millisecond
	b := coldBucket(t, coldSpec{series: 100, span: 12 * time.Hour, interval: 10 * time.Minute})
	db, fb, _ := coldDB(t, b, latency, 64<<20)
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	start := time.Now()
	got := queryFloats(t, db, coldBase, coldBase+12*3600*1000, x)
	took := time.Since(start)
	wantCounts(t, "query", got, 100, 72)
	// Sequential partitions would need at least 2 round trips each (postings,
	// then labels and samples): 12 for 6 partitions.
	rounds := took / latency
	t.Logf("%d reads, %s (%d round trips of %s)", getRequests(fb), took, rounds, latency)
	if rounds >= 12 {
		t.Fatalf("a cold query over 6 partitions took %s, %d round trips", took, rounds)
	}
}

// TestColdQuerySparse selects a few series spread over a partition: each is
// read on its own rather than with a scan of everything in between.
func TestColdQuerySparse(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 1000, span: 2 * time.Hour, interval: 4 * time.Minute})
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			db, _, all := coldDB(t, b, 0, coldCacheBytes(cached))
			queryFloats(t, db, coldBase, coldBase+2*3600*1000, x)
			db, _, sparse := coldDB(t, b, 0, coldCacheBytes(cached))
			got := queryFloats(t, db, coldBase, coldBase+2*3600*1000, x,
				labels.MustNewMatcher(labels.MatchRegexp, "instance", "host-(7|500|999)"))
			if len(got) != 3 {
				t.Fatalf("got %d series, want 3: %v", len(got), slices.Collect(maps.Keys(got)))
			}
			// The postings of the regexp read every value of instance; the
			// labels and samples of 3 series are a few blocks.
			s, a := sparse.dataBytes.Load(), all.dataBytes.Load()
			t.Logf("data blocks read: %d bytes for 3 series, %d for all", s, a)
			if s > a/3 {
				t.Fatalf("read %d bytes of data blocks for 3 series, %d for all 1000", s, a)
			}
		})
	}
}

func TestColdQueryFailure(t *testing.T) {
	b := coldBucket(t, coldSpec{series: 300, span: 4 * time.Hour, interval: 4 * time.Minute})
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			db, fb, _ := coldDB(t, b, 0, coldCacheBytes(cached))
			boom := errors.New("boom")
			// Opening the table succeeds; its data blocks fail.
			fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpGetRange}, Err: boom,
				Match: func(_ objstore.Op, name string) bool { return true }})
			q, err := db.Querier(coldBase, coldBase+4*3600*1000)
			if err != nil {
				t.Fatal(err)
			}
			ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
			for ss.Next() {
			}
			if err := ss.Err(); !errors.Is(err, boom) {
				t.Fatalf("select error %v, want %v", err, boom)
			}
			fb.ClearFaults()
			got := queryFloats(t, db, coldBase, coldBase+4*3600*1000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
			if len(got) != 300 {
				t.Fatalf("after the store recovered: %d series, want 300", len(got))
			}
		})
	}
}
