package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// TestTooFarInFuture: a sample further ahead of the clock than
// Options.TooFarInFuture is refused as bad data and does not become the
// newest sample, so that samples on time are still taken.
func TestTooFarInFuture(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	now := time.Now()
	db.now = func() time.Time { return now }
	lset := labels.FromStrings("__name__", "m")
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	app := db.Appender(context.Background())
	for _, c := range []struct {
		t      int64
		refuse bool
	}{
		{at(0), false},
		{at(9 * time.Minute), false},
		{at(11 * time.Minute), true},
		{now.UnixNano(), true}, // nanoseconds for milliseconds
		{at(time.Second), false},
	} {
		_, err := app.Append(0, lset, c.t, 1)
		if c.refuse != (err != nil) {
			t.Fatalf("sample at %d: err %v, want refused=%v", c.t, err, c.refuse)
		}
		var bd interface{ BadData() bool }
		if c.refuse && (!errors.Is(err, ErrTooFarInFuture) || !errors.As(err, &bd)) {
			t.Fatalf("sample at %d: %v, want ErrTooFarInFuture, bad data", c.t, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := db.head.maxT.Load(), at(9*time.Minute); got != want {
		t.Fatalf("newest sample %d, want %d", got, want)
	}

	opts := DefaultOptions()
	opts.TooFarInFuture = 0
	db0, _ := openMemDB(t, opts)
	app = db0.Appender(context.Background())
	if _, err := app.Append(0, lset, now.UnixNano(), 1); err != nil {
		t.Fatalf("TooFarInFuture 0 refused a sample: %v", err)
	}
	_ = app.Rollback()
}
