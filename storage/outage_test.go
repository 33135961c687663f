package storage

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/internal/e2e"
	"github.com/shaledb/shale/storage/objstore"
)

// TestCommitDuringOutage: while the object store refuses writes, a commit
// fails with ErrUnavailable once the write timeout passes, and at once after
// the store has been failing for longer than that, instead of hanging; the
// samples stay queryable. Once the store takes writes again commits succeed
// without a restart, and nothing acknowledged is lost across a reopen.
func TestCommitDuringOutage(t *testing.T) {
	for _, wal := range []bool{true, false} {
		name := "wal=off"
		if wal {
			name = "wal=on"
		}
		t.Run(name, func(t *testing.T) {
			mem := objstore.NewMemoryBucket()
			fb := objstore.NewFaultBucket(mem)
			opts := DefaultOptions()
			opts.WAL = wal
			opts.WriteTimeout = 100 * time.Millisecond
			lopts := testLSMOptions()
			lopts.MaxRetryBackoff = 5 * time.Millisecond
			db, err := openOn(context.Background(), fb, "tsdb", opts, lopts, nil, Components{})
			if err != nil {
				t.Fatal(err)
			}
			lset := labels.FromStrings("__name__", "x")
			commit := func(ts int64) error {
				app := db.Appender(context.Background())
				if _, err := app.Append(0, lset, ts, float64(ts)); err != nil {
					t.Fatalf("append %d: %v", ts, err)
				}
				return app.Commit()
			}
			var acked []int64
			if err := commit(1000); err != nil {
				t.Fatal(err)
			}
			acked = append(acked, 1000)

			denied := errors.New("access denied")
			remove := fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, Err: denied})
			if wal {
				// The first commit waits for the store up to the write
				// timeout.
				start := time.Now()
				err := commit(1500)
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("commit when the store starts failing: %v, want ErrUnavailable", err)
				}
				if took := time.Since(start); took < opts.WriteTimeout || took > opts.WriteTimeout+time.Second {
					t.Fatalf("commit answered after %v; want the write timeout, %v", took, opts.WriteTimeout)
				}
			} else {
				// Without the WAL a commit does not wait for the store:
				// a head flush is what meets the failure.
				go func() { _ = db.Flush(context.Background()) }()
			}
			e2e.Eventually(t, 10*time.Second, func() bool { return db.StoreHealth().WritesFailingFor(time.Now()) > opts.WriteTimeout }, "the store to be failing for longer than the write timeout")
			start := time.Now()
			err = commit(2000)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("commit while the store has been failing: %v, want ErrUnavailable", err)
			}
			if took := time.Since(start); took > opts.WriteTimeout {
				t.Fatalf("commit refused after %v; a store failing for longer than the write timeout refuses at once", took)
			}
			if !errors.Is(err, denied) {
				t.Fatalf("the error does not carry the store's: %v", err)
			}
			// The admin operations that write refuse at once too, rather
			// than keep their caller until the store is back (a caller
			// without a deadline of its own waited for ever).
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for what, op := range map[string]func() error{
				"snapshot": func() error { _, err := db.Snapshot(ctx, "during-outage", true); return err },
				"delete": func() error {
					return db.Delete(ctx, 0, 10000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "none"))
				},
			} {
				start := time.Now()
				if err := op(); !errors.Is(err, ErrUnavailable) {
					t.Fatalf("%s while the store has been failing: %v, want ErrUnavailable", what, err)
				}
				if took := time.Since(start); took > opts.WriteTimeout {
					t.Fatalf("%s refused after %v; want at once", what, took)
				}
			}
			remove()
			e2e.Eventually(t, 10*time.Second, func() bool { return !db.StoreHealth().Failing }, "the writer to recover")
			if err := commit(3000); err != nil {
				t.Fatalf("commit after the store came back: %v", err)
			}
			acked = append(acked, 3000)
			if err := db.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			db = openTestDB(t, fb, opts)
			defer db.Close()
			got := queryFloats(t, db, 0, 10000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
			have := map[int64]bool{}
			for _, s := range got[lset.String()] {
				have[s.t] = true
			}
			for _, ts := range acked {
				if !have[ts] {
					t.Fatalf("acknowledged sample at %d lost: %v", ts, got)
				}
			}
		})
	}
}

// TestCommitTimesOutOnASlowStore: a commit that waits for a store that does
// not answer within the write timeout fails with ErrUnavailable when the
// timeout passes; the samples are in the head.
func TestCommitTimesOutOnASlowStore(t *testing.T) {
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	opts := DefaultOptions()
	opts.WriteTimeout = 50 * time.Millisecond
	db := openTestDB(t, fb, opts)
	defer db.Close()
	// The store takes the request and answers long after the timeout.
	fb.SetOpLatency(objstore.OpPut, 20*opts.WriteTimeout)
	lset := labels.FromStrings("__name__", "x")
	app := db.Appender(context.Background())
	if _, err := app.Append(0, lset, 1000, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := app.Commit()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("commit on a store that does not answer: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took < opts.WriteTimeout {
		t.Fatalf("commit gave up after %v, before the write timeout", took)
	}
	if got := queryFloats(t, db, 0, 2000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x")); len(got[lset.String()]) != 1 {
		t.Fatalf("the sample is not in the head: %v", got)
	}
	fb.SetOpLatency(objstore.OpPut, 0)
}

// TestNewSeriesDuringOutage: once the LSM's backlog is full because the
// store refuses writes, a commit that has new series to record fails as
// ErrUnavailable within the write timeout instead of waiting for the store;
// appending to a new series never waits for the store.
func TestNewSeriesDuringOutage(t *testing.T) {
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	opts := DefaultOptions()
	opts.WAL = false // only the series' forward-index entries reach the LSM before a flush
	opts.WriteTimeout = 100 * time.Millisecond
	lopts := testLSMOptions()
	lopts.MemtableBytes, lopts.MaxUnflushedBytes = 64<<10, 64<<10
	lopts.MaxRetryBackoff = 5 * time.Millisecond
	db, err := openOn(context.Background(), fb, "tsdb", opts, lopts, nil, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	remove := fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpPut}, Err: errors.New("access denied")})
	defer remove()
	for i := 0; ; i++ {
		if i == 100_000 {
			t.Fatal("100,000 new series recorded while the store refuses every write")
		}
		app := db.Appender(context.Background())
		if _, err := app.Append(0, labels.FromStrings("__name__", "x", "i", strings.Repeat("v", 100)+strconv.Itoa(i)), 1000, 1); err != nil {
			t.Fatalf("append to new series %d: %v", i, err)
		}
		start := time.Now()
		err := app.Commit()
		took := time.Since(start)
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("commit of new series %d: %v, want ErrUnavailable", i, err)
		}
		if !strings.Contains(err.Error(), "record new series") {
			t.Fatalf("commit of new series %d failed in another step: %v", i, err)
		}
		if took > opts.WriteTimeout+time.Second {
			t.Fatalf("commit of new series %d refused after %v, past the write timeout", i, took)
		}
		return
	}
}
