package storage

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// TestReaderFollowsWriter opens a read-only DB beside a writer and checks
// that it sees committed samples before, during and after the writer's
// flushes and partition closes, never twice, and refuses writes.
func TestReaderFollowsWriter(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	w, b := openMemDB(t, opts)
	s := labels.FromStrings("__name__", "follow", "job", "a")
	appendFloats(t, w, s, tsample{1000, 1})

	r := openTestReader(t, b, opts, nil)
	defer r.Close()
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "follow")
	var want []tsample
	check := func(what string) {
		t.Helper()
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		got := queryFloats(t, r, math.MinInt64, math.MaxInt64, m)[s.String()]
		if !sameSamples(got, want) {
			t.Fatalf("%s: reader sees %v, want %v", what, got, want)
		}
	}
	want = []tsample{{1000, 1}}
	check("committed before the reader opened")
	for i := int64(2); i <= 5; i++ {
		appendFloats(t, w, s, tsample{i * 1000, float64(i)})
		want = append(want, tsample{i * 1000, float64(i)})
	}
	check("committed, in the head log only")
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a head flush")
	appendFloats(t, w, s, tsample{6000, 6})
	want = append(want, tsample{6000, 6})
	check("after a flush and more commits")
	// Move time on so the first partition closes.
	hour := time.Hour.Milliseconds()
	appendFloats(t, w, s, tsample{2 * hour, 7})
	want = append(want, tsample{2 * hour, 7})
	if err := w.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	check("after the first partition closed")

	app := r.Appender(ctx)
	if _, err := app.Append(0, s, 3*hour, 1); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("append to a reader: %v, want ErrReadOnly", err)
	}
}
