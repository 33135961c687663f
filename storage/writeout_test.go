package storage

import (
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/internal/seriestest"
	"github.com/shaledb/shale/storage/objstore"
)

// gatedBucket holds the first Put after armed until release is closed,
// saying so on reached.
type gatedBucket struct {
	objstore.Bucket
	armed            atomic.Bool
	once             sync.Once
	reached, release chan struct{}
}

func (g *gatedBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	if g.armed.Load() {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return g.Bucket.Put(ctx, name, r, size, opts)
}

// TestLateSampleWaitsForWriteOut: a sample for a partition that a flush is
// writing out for good waits for the flush and then lands, where it was
// answered 503 (a sender catching up hours behind met one for every request
// during each such flush).
func TestLateSampleWaitsForWriteOut(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.WAL = false
	g := &gatedBucket{Bucket: objstore.NewMemoryBucket(), reached: make(chan struct{}), release: make(chan struct{})}
	db := openTestDB(t, g, opts)
	defer db.Close()

	now := time.Now().UnixMilli()
	late := now - (3 * time.Hour).Milliseconds() // a partition the flush closes
	onTime, behind := labels.FromStrings("__name__", "m", "s", "on_time"), labels.FromStrings("__name__", "m", "s", "late")
	app := db.Appender(ctx)
	for _, s := range []struct {
		lset labels.Labels
		t    int64
	}{{onTime, now}, {behind, late}} {
		if _, err := app.Append(0, s.lset, s.t, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}

	waiting := make(chan struct{}, 1)
	db.waitingHook = func() { waiting <- struct{}{} }
	g.armed.Store(true)
	flushed := make(chan error, 1)
	go func() { flushed <- db.flushHead(ctx, closeOld) }()
	<-g.reached // the late sample's partition is closed, its data on the way out

	appended := make(chan error, 1)
	go func() {
		app := db.Appender(ctx)
		if _, err := app.Append(0, behind, late+1000, 2); err != nil {
			appended <- err
			return
		}
		appended <- app.Commit()
	}()
	select {
	case err := <-appended:
		close(g.release)
		<-flushed
		t.Fatalf("a late sample during the write-out was answered %v; want it to wait", err)
	case <-waiting:
	}
	close(g.release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatalf("the late sample after the write-out: %v", err)
	}
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := seriestest.ReadAll(t, q)[behind.String()]; len(got) != 2 {
		t.Fatalf("late series: %d samples, want 2", len(got))
	}
}
