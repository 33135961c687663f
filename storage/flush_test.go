package storage

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/objstore"
)

// TestQueriesDuringFlush runs queries while flushes of many small batches cut
// series and let their samples go: every query must see every sample
// committed before it started, once, whichever side of a batch a series is.
func TestQueriesDuringFlush(t *testing.T) {
	defer func(n int) { maxBatchBytes = n }(maxBatchBytes)
	maxBatchBytes = 256 // a batch every few series

	const series, rounds = 200, 30
	db := openTestDB(t, objstore.NewMemoryBucket(), DefaultOptions())
	defer db.Close()
	lsets := make([]labels.Labels, series)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
	}
	var committed atomic.Int64 // rounds every series has
	done := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		defer close(done)
		for r := int64(1); r <= rounds; r++ {
			app := db.Appender(context.Background())
			for _, ls := range lsets {
				if _, err := app.Append(0, ls, r*15000, float64(r)); err != nil {
					errs <- err
					return
				}
			}
			if err := app.Commit(); err != nil {
				errs <- err
				return
			}
			committed.Store(r)
		}
	}()
	go func() { // flusher
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := db.Flush(context.Background()); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() { // querier
		defer wg.Done()
		m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
		for {
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			before := committed.Load()
			got := queryFloats(t, db, math.MinInt64, math.MaxInt64, m)
			for _, ls := range lsets {
				smps := got[ls.String()]
				if int64(len(smps)) < before {
					errs <- fmt.Errorf("%s: %d samples, %d rounds committed before the query", ls, len(smps), before)
					return
				}
				for j, s := range smps {
					if r := int64(j + 1); s.t != r*15000 || s.v != float64(r) {
						errs <- fmt.Errorf("%s: sample %d is (%d, %g), want (%d, %d)", ls, j, s.t, s.v, r*15000, r)
						return
					}
				}
			}
			if finished {
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := testutil.ToFloat64(db.metrics.flushes); n < 2 {
		t.Fatalf("%g flushes ran beside the writes, want several", n)
	}
}
