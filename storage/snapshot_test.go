package storage

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// TestSnapshot takes a snapshot with the head and one without while samples
// are only in the head, writes and deletes after them, and reads each as a
// database of its own: copied to another bucket and opened as a writer, and
// in place by a reader of the checkpoint. The one with the head has every
// sample acknowledged before it and nothing after; the one without has
// only what had been written out.
func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	db, b := openMemDB(t, opts)
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
	a := labels.FromStrings("__name__", "up", "job", "a")
	c := labels.FromStrings("__name__", "up", "job", "c")
	var early []tsample
	for i := range 30 {
		early = append(early, tsample{base + int64(i)*15_000, float64(i)})
	}
	appendFloats(t, db, a, early[:20]...)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	appendFloats(t, db, a, early[20:]...) // in the head only
	if _, err := db.Snapshot(ctx, "nohead", false); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Snapshot(ctx, "withhead", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Snapshot(ctx, "withhead", true); !errors.Is(err, lsm.ErrCheckpointExists) {
		t.Fatalf("snapshot of a taken name: %v", err)
	}
	// After: a new series, more samples, and a delete of the first series.
	appendFloats(t, db, c, tsample{base + 600_000, 1})
	if err := db.Delete(ctx, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "job", "a")); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")}
	if got := queryFloats(t, db, math.MinInt64, math.MaxInt64, all...); len(got[a.String()]) != 0 || len(got[c.String()]) != 1 {
		t.Fatalf("the writer after the delete: %v", got)
	}

	for _, s := range []struct {
		name string
		want int
	}{{"withhead", 30}, {"nohead", 20}} {
		dst := objstore.NewMemoryBucket()
		if _, err := lsm.CopyCheckpoint(ctx, b, "tsdb", s.name, dst, "tsdb", nil); err != nil {
			t.Fatal(err)
		}
		cp := openTestDB(t, dst, opts)
		got := queryFloats(t, cp, math.MinInt64, math.MaxInt64, all...)
		wantCounts(t, s.name+" copied", got, 1, s.want)
		if err := cp.Close(); err != nil {
			t.Fatal(err)
		}

		ropts := lsm.DefaultReaderOptions()
		ropts.Checkpoint = s.name
		r, err := openReadOnlyOn(ctx, b, "tsdb", opts, ropts, nil, Components{})
		if err != nil {
			t.Fatal(err)
		}
		got = queryFloats(t, r, math.MinInt64, math.MaxInt64, all...)
		wantCounts(t, s.name+" in place", got, 1, s.want)
		if _, err := r.Snapshot(ctx, "x", true); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("snapshot on a reader: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
