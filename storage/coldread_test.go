package storage

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/objstore"
)

// waveBucket adds latency to every ranged read (a table's blocks) and
// records when each starts and ends.
type waveBucket struct {
	objstore.Bucket
	latency time.Duration
	mu      sync.Mutex
	reads   [][2]time.Time
}

func (w *waveBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	start := time.Now()
	t := time.NewTimer(w.latency)
	select {
	case <-ctx.Done():
		t.Stop()
		return nil, ctx.Err()
	case <-t.C:
	}
	rc, err := w.Bucket.GetRange(ctx, name, off, length)
	w.mu.Lock()
	w.reads = append(w.reads, [2]time.Time{start, time.Now()})
	w.mu.Unlock()
	return rc, err
}

// waves counts the sequential rounds of the reads since the last call: a
// read that starts after a read of the current round ended starts the next.
func (w *waveBucket) waves() (waves, reads int) {
	w.mu.Lock()
	rs := w.reads
	w.reads = nil
	w.mu.Unlock()
	slices.SortFunc(rs, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var firstEnd time.Time
	for _, r := range rs {
		if waves == 0 || !r[0].Before(firstEnd) {
			waves++
			firstEnd = r[1]
			continue
		}
		if r[1].Before(firstEnd) {
			firstEnd = r[1]
		}
	}
	return waves, len(rs)
}

// TestColdQuerySmallPartitionsOneRound: a cold query over partitions small
// enough to read whole reads each in one round, postings, labels and samples
// together, where a larger partition takes two (postings, then the rest).
func TestColdQuerySmallPartitionsOneRound(t *testing.T) {
	const latency = 20 * time.Millisecond
	x := labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")
	defer func(n, l int64) { wholePartitionBytes, labelPostingsBytes = n, l }(wholePartitionBytes, labelPostingsBytes)
	job := labels.MustNewMatcher(labels.MatchRegexp, "job", "job-[0-9]")
	for _, tc := range []struct {
		series int
		limit  int64 // wholePartitionBytes
		labels int64 // labelPostingsBytes
		ms     []*labels.Matcher
		want   int // rounds of data reads of the query, the open's and the registry's apart
	}{
		{100, 1 << 20, 64 << 10, []*labels.Matcher{x}, 1},
		{100, 4 << 10, 64 << 10, []*labels.Matcher{x}, 2}, // partitions larger than that
		// A label matcher besides the name: a few series, not read whole;
		// the regular expression's postings come with the name's.
		{100, 1 << 20, 64 << 10, []*labels.Matcher{x, job}, 2},
		// The label's postings too large to read in the first round:
		// a round of their own. (With 100 series a partition's postings
		// are one block, which the first round reads: 1,000 series' are
		// a dozen, the job label's apart from the name's.)
		{1000, 1 << 20, 0, []*labels.Matcher{x, job}, 3},
	} {
		wholePartitionBytes, labelPostingsBytes = tc.limit, tc.labels
		series := tc.series
		const interval = 5 * time.Minute
		b := coldBucket(t, coldSpec{series: series, span: 6 * time.Hour, interval: interval})
		wb := &waveBucket{Bucket: b, latency: latency}
		db, _, _ := coldDB(t, wb, 0, 256<<20)
		ctx := context.Background()
		// What any first query reads: the tables' meta regions and the
		// registry.
		if _, err := db.partitions(ctx, coldBase, coldBase+6*3600*1000); err != nil {
			t.Fatal(err)
		}
		wb.waves()
		parts, err := db.partitions(ctx, coldBase, coldBase+6*3600*1000)
		if err != nil {
			t.Fatal(err)
		}
		whole := db.wholePartitions(ctx, parts, tc.ms)
		if tc.want == 1 && len(whole) != 3 {
			t.Fatalf("%d series: partitions read whole %v, want all 3", series, whole)
		}
		if tc.want > 1 && whole != nil {
			t.Fatalf("%d series: partitions read whole %v, want none", series, whole)
		}
		got := queryFloats(t, db, coldBase, coldBase+6*3600*1000, tc.ms...)
		wantCounts(t, fmt.Sprintf("%d series", series), got, series, int(6*time.Hour/interval))
		waves, reads := wb.waves()
		t.Logf("%d series: %d reads in %d rounds; partitions read whole: %v", series, reads, waves, whole)
		if waves != tc.want {
			t.Errorf("%d series: %d rounds of reads, want %d", series, waves, tc.want)
		}
	}
}

// TestLargeSampleReadsSkipCache: the sample reads of a query whose stored
// blocks come to more than noFillShare times the block cache's capacity
// read past the cache, those of one within it through it, and the query's
// answer is the same either way.
func TestLargeSampleReadsSkipCache(t *testing.T) {
	defer func(n int) { minNoFillReads = n }(minNoFillReads)
	minNoFillReads = 1
	// A partition's sample blocks span 15 or so table blocks, so that reads
	// of a series at either end of it are well apart.
	const series, interval = 100, time.Minute
	b := coldBucket(t, coldSpec{series: series, span: 6 * time.Hour, interval: interval})
	ctx := context.Background()
	mint, maxt := int64(coldBase), int64(coldBase+6*3600*1000)
	sized, _, _ := coldDB(t, b, 0, 256<<20)
	parts, err := sized.partitions(ctx, mint, maxt)
	if err != nil || len(parts) == 0 {
		t.Fatalf("partitions: %v, %v", parts, err)
	}
	var reads []rangeRead
	var total int64
	for _, pv := range parts {
		rd := rangeRead{part: pv.start, sub: subSamples, r: refRange{0, math.MaxUint32}}
		kr := rangeKeys(rd.part, rd.sub, rd.r)
		n, err := sized.lsm.RangeBytes(ctx, kr.Lower, kr.Upper)
		if err != nil || n == 0 {
			t.Fatalf("range bytes of partition %d: %d, %v", pv.start, n, err)
		}
		total += n
		reads = append(reads, rd)
	}
	minNoFillReads = len(reads)
	within := (total + noFillShare - 1) / noFillShare // the smallest capacity that holds them at the share
	for _, tc := range []struct {
		capacity int64
		noFill   bool
	}{{within, false}, {within - 1, true}, {total, false}, {4 << 10, true}} {
		db, _, _ := coldDB(t, b, 0, tc.capacity)
		if got := db.lsm.CacheCapacity(); got != tc.capacity {
			t.Fatalf("cache capacity %d, want %d", got, tc.capacity)
		}
		rs := slices.Clone(reads)
		before := testutil.ToFloat64(db.metrics.pastCache)
		db.markNoFill(ctx, rs)
		if counted := testutil.ToFloat64(db.metrics.pastCache) - before; counted != map[bool]float64{true: 1}[tc.noFill] {
			t.Errorf("capacity %d: %v selects past the cache counted", tc.capacity, counted)
		}
		for _, rd := range rs {
			if rd.noFill != tc.noFill {
				t.Errorf("capacity %d for %d stored bytes: partition %d read with noFill %v, want %v", tc.capacity, total, rd.part, rd.noFill, tc.noFill)
			}
		}
		got := queryFloats(t, db, mint, maxt, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
		wantCounts(t, fmt.Sprintf("capacity %d", tc.capacity), got, series, int(6*time.Hour/interval))
	}
	// Reads of a few series at either end of each partition: the
	// partitions' spans are over the share, the reads are not.
	var ends []rangeRead
	var endBytes int64
	for _, rd := range reads {
		for _, ref := range []uint32{0, series - 1} {
			e := rangeRead{part: rd.part, sub: subSamples, r: refRange{ref, ref + 1}}
			kr := rangeKeys(e.part, e.sub, e.r)
			n, err := sized.lsm.RangeBytes(ctx, kr.Lower, kr.Upper)
			if err != nil {
				t.Fatal(err)
			}
			endBytes += n
			ends = append(ends, e)
		}
	}
	if 2*endBytes > total {
		t.Fatalf("the reads at the ends span %d of %d bytes: not apart", endBytes, total)
	}
	db, _, _ := coldDB(t, b, 0, endBytes/noFillShare+1)
	db.markNoFill(ctx, ends)
	for _, rd := range ends {
		if rd.noFill {
			t.Errorf("reads of %d bytes, partitions of %d, capacity %d: partition %d read with noFill", endBytes, total, endBytes/noFillShare+1, rd.part)
		}
	}
	// Fewer reads than minNoFillReads are not sized.
	minNoFillReads = len(reads) + 1
	db, _, _ = coldDB(t, b, 0, 4<<10)
	rs := slices.Clone(reads)
	db.markNoFill(ctx, rs)
	if rs[0].noFill {
		t.Errorf("%d reads, fewer than %d, marked", len(rs), minNoFillReads)
	}
}
