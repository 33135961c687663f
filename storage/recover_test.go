package storage

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// TestRecoverManySeries: a restart recovers each series of the open
// partition from the forward index, over several of loadForwardLocked's
// batches, with its labels and its ref (a series created after the restart
// gets the next one); a forward index with a gap in its refs fails the open
// with a message naming both refs, and leaves no goroutine behind (goleak).
func TestRecoverManySeries(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	db, b := openMemDB(t, opts)
	n := 2*forwardBatch + 276
	app := db.Appender(ctx)
	for i := range n {
		if _, err := app.Append(0, labels.FromStrings("__name__", "m", "i", fmt.Sprint(i)), 1000, float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	db = reopen(t, db, b, opts)
	p := db.head.parts[0]
	if p == nil || len(p.series) != n {
		t.Fatalf("partition 0 recovered %v series, want %d", p, n)
	}
	for ref, s := range p.series {
		if want := fmt.Sprint(ref); s.lset().Get("i") != want {
			t.Fatalf("ref %d holds series %s, want i=%s", ref, s.lset(), want)
		}
	}
	if int(p.recorded.Load()) != n {
		t.Fatalf("recorded %d, want %d", p.recorded.Load(), n)
	}
	appendFloats(t, db, labels.FromStrings("__name__", "m", "i", "new"), tsample{2000, 1})
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	if len(got) != n+1 {
		t.Fatalf("%d series after the restart, want %d", len(got), n+1)
	}
	if s := p.series[n]; s == nil || s.lset().Get("i") != "new" {
		t.Fatalf("the series created after the restart is not ref %d", n)
	}

	// A gap: ref n+5 where n+1 comes next.
	var batch lsm.Batch
	batch.Put(forwardKey(0, uint32(n+5)), index.EncodeLabels(nil, labels.FromStrings("__name__", "m", "i", "gap")))
	if err := db.write(ctx, &batch, true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := openOn(ctx, b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err == nil {
		db2.Close()
		t.Fatal("open with a gap in the forward index succeeded")
	}
	if want := fmt.Sprintf("forward index has ref %d where %d was expected", n+5, n+1); !strings.Contains(err.Error(), want) {
		t.Fatalf("open: %v, want an error saying %q", err, want)
	}
}
