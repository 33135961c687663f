package storage

import (
	"context"
	"io"
	"math/rand/v2"
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
	opts := DefaultOptions()
	opts.WAL = false
	opts.Retention = 0
	db, err := Open(ctx, b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err != nil {
		t.Fatal(err)
	}
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
	w := db.kv.(*lsmWriter)
	if err := w.db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.db.Compact(ctx); err != nil {
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
		copts := cache.DefaultOptions()
		copts.MemoryBytes = cacheBytes
		tc, err := cache.New(copts, cache.Components{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tc.Close() })
		c = tc
	}
	ropts := lsm.DefaultReaderOptions()
	ropts.PollInterval = 0
	opts := DefaultOptions()
	opts.WAL = false
	opts.Retention = 0
	db, err := OpenReadOnly(context.Background(), fb, "tsdb", opts, ropts, c, Components{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fb.ResetCounts()
	cb.reset()
	return db, fb, cb
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
	if err := db.kv.Scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, count); err != nil {
		t.Fatal(err)
	}
	for part := db.partitionOf(mint); part <= maxt; part += db.partMs {
		pk := postingsKey(part, "__name__", name)
		v, ok, err := db.kv.Get(ctx, pk)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		n += int64(len(pk) + len(v))
		bm, err := (&lsmIndex{kv: db.kv, part: part}).Postings(ctx, "__name__", name)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range bm.ToArray() {
			for _, k := range [][]byte{forwardKey(part, ref), samplesKey(part, ref)} {
				v, _, err := db.kv.Get(ctx, k)
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
	if len(got) != 20 {
		t.Fatalf("got %d series, want 20", len(got))
	}
	for k, s := range got {
		if len(s) != 240 {
			t.Fatalf("%s: %d samples, want 240", k, len(s))
		}
	}
	if getRequests(fb) == 0 {
		t.Fatal("a cold query made no object-store reads")
	}
}
