package storage

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// changeLog records what OnChange reports.
type changeLog struct {
	mu  sync.Mutex
	got [][2]int64
}

func (l *changeLog) add(mint, maxt int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, [2]int64{mint, maxt})
}

// take returns what was reported since the last call.
func (l *changeLog) take() [][2]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// covers reports whether some reported range contains [mint, maxt].
func covers(got [][2]int64, mint, maxt int64) bool {
	for _, r := range got {
		if r[0] <= mint && maxt <= r[1] {
			return true
		}
	}
	return false
}

// TestOnChange checks that every change to what queries see is reported with
// a time range that covers it, on the writer and on a reader.
func TestOnChange(t *testing.T) {
	ctx := context.Background()
	hour := time.Hour.Milliseconds()
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	opts.Retention = 3 * time.Hour
	w, b := openMemDB(t, opts)
	var wl changeLog
	w.OnChange(wl.add)
	s := labels.FromStrings("__name__", "c")

	appendFloats(t, w, s, tsample{10 * hour, 1}, tsample{10*hour + 5000, 2})
	if got := wl.take(); len(got) != 1 || got[0] != [2]int64{10 * hour, 10*hour + 5000} {
		t.Fatalf("commit reported %v", got)
	}
	appendFloats(t, w, s, tsample{8 * hour, 3}) // backfill
	if got := wl.take(); !covers(got, 8*hour, 8*hour) {
		t.Fatalf("backfill reported %v", got)
	}
	if err := w.Delete(ctx, 8*hour, 9*hour, labels.MustNewMatcher(labels.MatchEqual, "__name__", "c")); err != nil {
		t.Fatal(err)
	}
	if got := wl.take(); !covers(got, 8*hour, 9*hour) {
		t.Fatalf("delete reported %v", got)
	}
	appendFloats(t, w, s, tsample{12 * hour, 5}) // retention now reaches 9 h
	if err := w.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	wl.take()
	if err := w.applyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	if got := wl.take(); !covers(got, math.MinInt64, 9*hour-1) {
		t.Fatalf("retention reported %v", got)
	}

	// A reader reports the records it applies and, on a new manifest,
	// everything.
	r := openTestReader(t, b, opts, nil)
	defer r.Close()
	var rl changeLog
	r.OnChange(rl.add)
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rl.take(); !covers(got, math.MinInt64, math.MaxInt64) {
		t.Fatalf("a reader's first look reported %v", got)
	}
	appendFloats(t, w, s, tsample{12*hour + 7, 4})
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rl.take(); !covers(got, 12*hour+7, 12*hour+7) || covers(got, math.MinInt64, math.MaxInt64) {
		t.Fatalf("a record reported %v", got)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rl.take(); !covers(got, math.MinInt64, math.MaxInt64) {
		t.Fatalf("a new manifest reported %v", got)
	}
	if err := w.CatchUp(ctx); err != nil { // nothing on a writer
		t.Fatal(err)
	}
}
