package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
)

// TestBackfill: samples older than the out-of-order window but within
// retention are accepted, into partitions never written and into ones
// written out before (merged with what they hold), queryable at once, after
// a flush and after a reopen; samples older than retention are refused.
func TestBackfill(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.Retention = 30 * 24 * time.Hour
	db, b := openMemDB(t, opts)
	day := int64(24 * time.Hour / time.Millisecond)
	now := int64(100) * day
	x := labels.FromStrings("__name__", "x", "job", "a")
	y := labels.FromStrings("__name__", "y", "job", "a")

	// An old partition written out: x at now-3d and now-3d+1m.
	appendFloats(t, db, x, tsample{now - 3*day, 1}, tsample{now - 3*day + 60_000, 2})
	// The present moves on and closes it.
	appendFloats(t, db, x, tsample{now, 100})
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	if got := len(db.head.parts); got != 1 {
		t.Fatalf("%d partitions in the head after the flush, want the present one", got)
	}

	// Backfill: between the samples of the written-out partition, a new
	// series there, and a partition never written (10 days ago).
	appendFloats(t, db, x, tsample{now - 3*day + 30_000, 1.5})
	appendFloats(t, db, y, tsample{now - 3*day, 7})
	appendFloats(t, db, x, tsample{now - 10*day, -1})

	want := map[string][]tsample{
		x.String(): {{now - 10*day, -1}, {now - 3*day, 1}, {now - 3*day + 30_000, 1.5}, {now - 3*day + 60_000, 2}, {now, 100}},
		y.String(): {{now - 3*day, 7}},
	}
	check := func(when string) {
		t.Helper()
		got := queryFloats(t, db, now-20*day, now+1, labels.MustNewMatcher(labels.MatchEqual, "job", "a"))
		for k, w := range want {
			if !sameSamples(got[k], w) {
				t.Fatalf("%s: %s = %v, want %v", when, k, got[k], w)
			}
		}
	}
	check("right after the backfill")
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	check("after the flush that writes the backfill out")
	db = reopen(t, db, b, opts)
	defer db.Close()
	check("after a reopen")

	// Older than retention: refused, as a 400 the sender drops.
	app := db.Appender(ctx)
	if _, err := app.Append(0, x, now-31*day, 0); !errors.Is(err, promstorage.ErrOutOfBounds) {
		t.Fatalf("a sample older than retention: %v, want ErrOutOfBounds", err)
	}
	_ = app.Rollback()
}
