package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestSeekAcrossPartitions: a Seek to a time in the middle of a later
// partition lands on that partition's first sample at or after it, not on
// the first sample of the partition after the one the iterator was in.
func TestSeekAcrossPartitions(t *testing.T) {
	opts := DefaultOptions()
	opts.Retention, opts.OutOfOrderWindow = 0, 0
	db, _ := openMemDB(t, opts)
	lset := labels.FromStrings("__name__", "m")
	var samples []tsample
	for ts := int64(0); ts < 6*time.Hour.Milliseconds(); ts += time.Minute.Milliseconds() {
		samples = append(samples, tsample{ts, float64(ts)})
	}
	appendFloats(t, db, lset, samples...)
	part := opts.PartitionDuration.Milliseconds()
	q, err := db.Querier(0, 6*time.Hour.Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	if !ss.Next() {
		t.Fatalf("no series: %v", ss.Err())
	}
	it := ss.At().Iterator(nil)
	if it.Next() != chunkenc.ValFloat || it.AtT() != 0 {
		t.Fatalf("first sample at %d", it.AtT())
	}
	for _, c := range []struct{ seek, want int64 }{
		{part + 30*60_000 + 30_000, part + 31*60_000}, // the next partition, past its first sample
		{2*part + 90*60_000 + 1, 2*part + 91*60_000},  // the one after, likewise
		{2*part + 91*60_000, 2*part + 91*60_000},      // where it is: stays
	} {
		if vt := it.Seek(c.seek); vt != chunkenc.ValFloat {
			t.Fatalf("Seek(%d): %v, %v", c.seek, vt, it.Err())
		}
		if got, v := it.At(); got != c.want || v != float64(c.want) {
			t.Fatalf("Seek(%d): at %d (value %g), want %d", c.seek, got, v, c.want)
		}
	}
	if vt := it.Seek(6 * time.Hour.Milliseconds()); vt != chunkenc.ValNone {
		t.Fatalf("Seek past the end: %v at %d", vt, it.AtT())
	}
}
