package storage

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// roundsBucket counts the round trips of reads: the longest chain of
// reads each started after the one before it ended. Reads that overlap in
// time are one round; a read that waits for another's answer before it
// starts is a round more, whatever else is in flight meanwhile (a few
// chains of reads side by side still cost the length of the longest).
type roundsBucket struct {
	objstore.Bucket
	mu sync.Mutex
	// ended is the longest chain among the reads that have ended, longest
	// among all reads begun.
	ended, longest int
}

// begin returns the read's place in its chain, for end.
func (r *roundsBucket) begin() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.ended + 1
	r.longest = max(r.longest, n)
	return n
}

func (r *roundsBucket) end(n int) {
	r.mu.Lock()
	r.ended = max(r.ended, n)
	r.mu.Unlock()
}

func (r *roundsBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	defer r.end(r.begin())
	return r.Bucket.Get(ctx, name)
}

func (r *roundsBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	defer r.end(r.begin())
	return r.Bucket.GetRange(ctx, name, off, length)
}

func (r *roundsBucket) reset() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.longest
	r.ended, r.longest = 0, 0
	return n
}

// unCompactedBucket holds series of x and y over 6 h at 1 min, the head
// flushed every 20 min and never compacted: every partition's keys are
// spread over six L0 tables.
func unCompactedBucket(t testing.TB, series int) *objstore.MemoryBucket {
	t.Helper()
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	db := openTestDB(t, b, coldOptions())
	var lsets []labels.Labels
	for i := range series {
		lsets = append(lsets,
			labels.FromStrings("__name__", "x", "instance", "host-"+strconv.Itoa(i), "job", "job-"+strconv.Itoa(i%10)),
			labels.FromStrings("__name__", "y", "instance", "host-"+strconv.Itoa(i), "job", "job-"+strconv.Itoa(i%10)))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for ts := coldBase; ts < coldBase+6*3600*1000; ts += 60_000 {
		app := db.Appender(ctx)
		for _, l := range lsets {
			if _, err := app.Append(0, l, ts, float64(rng.IntN(1000))); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		if (ts-coldBase)%(20*60_000) == 0 {
			if err := db.flushHead(ctx, closeOld); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.flushHead(ctx, closeAll); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestColdQueryRoundTrips counts the round trips of a cold query of every
// series of x over three partitions of a read-only DB just opened: the
// registry, the postings, then labels and sample blocks (and the tables'
// meta where the open did not read it), whatever the number of series,
// whether the LSM is compacted into a sorted run or its keys are spread over
// many L0 tables (each table is read at once, not one after another: the
// postings of a partition over 6 L0 tables were read table by table, which
// a count of the times no read was in flight did not see, as three
// partitions' chains overlapped).
func TestColdQueryRoundTrips(t *testing.T) {
	// Reads of one round must start before any of them ends: at 20 ms a
	// busy machine under the race detector sometimes started one late and
	// counted an extra round.
	const latency = 100 * time.Millisecond
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	for _, c := range []struct {
		name   string
		series int
		bucket func(testing.TB, int) *objstore.MemoryBucket
		max    int
	}{
		{"compacted", 100, func(t testing.TB, n int) *objstore.MemoryBucket {
			return coldBucket(t, coldSpec{series: n, span: 6 * time.Hour, interval: 2 * time.Minute})
		}, 4},
		{"compacted", 2000, func(t testing.TB, n int) *objstore.MemoryBucket {
			return coldBucket(t, coldSpec{series: n, span: 6 * time.Hour, interval: 2 * time.Minute})
		}, 4},
		{"l0", 100, unCompactedBucket, 4},
		{"l0", 2000, unCompactedBucket, 4},
	} {
		t.Run(fmt.Sprintf("lsm=%s/series=%d", c.name, c.series), func(t *testing.T) {
			fb := objstore.NewFaultBucket(c.bucket(t, c.series))
			fb.SetLatency(latency)
			rb := &roundsBucket{Bucket: fb}
			tc := newTestCache(t, 256<<20)
			ropts := lsm.DefaultReaderOptions()
			ropts.PollInterval = 0
			db, err := openReadOnlyOn(context.Background(), rb, "tsdb", coldOptions(), ropts, tc, Components{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rb.reset()
			got := queryFloats(t, db, coldBase, coldBase+6*3600*1000-1, x)
			if len(got) != c.series {
				t.Fatalf("%d series, want %d", len(got), c.series)
			}
			rounds := rb.reset()
			t.Logf("%d round trips, %d reads", rounds, getRequests(fb))
			if rounds > c.max {
				t.Fatalf("a cold query made %d round trips, want at most %d", rounds, c.max)
			}
			queryFloats(t, db, coldBase, coldBase+6*3600*1000-1, x)
			if r := rb.reset(); r != 0 {
				t.Fatalf("a repeated query made %d round trips", r)
			}
		})
	}
}
