package storage

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/storage/objstore"
)

// takeOver opens a second writer on b, as a restart after a crash of the
// first would: it fences the first and recovers from what the store holds.
func takeOver(t *testing.T, b objstore.Bucket, opts Options) *DB {
	t.Helper()
	db, err := openOn(context.Background(), b, "tsdb", opts, testLSMOptions(), nil, Components{})
	if err != nil {
		t.Fatalf("open the second writer: %v", err)
	}
	return db
}

// TestSeriesOfAnotherAppenderRecorded: an appender that commits samples of a
// series another appender created and has not committed records that
// series itself before its samples are acknowledged, so they survive a crash
// of the writer right after the acknowledgement.
func TestSeriesOfAnotherAppenderRecorded(t *testing.T) {
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	db := openTestDB(t, b, opts)
	lset := labels.FromStrings("__name__", "x", "job", "a")
	creator := db.Appender(context.Background())
	if _, err := creator.Append(0, lset, 1000, 1); err != nil {
		t.Fatal(err)
	}
	user := db.Appender(context.Background())
	if _, err := user.Append(0, lset, 2000, 2); err != nil {
		t.Fatal(err)
	}
	if err := user.Commit(); err != nil {
		t.Fatal(err)
	}
	// The creator has not committed: only the user's sample is
	// acknowledged.
	db2 := takeOver(t, b, opts)
	defer db2.Close()
	_ = creator.Rollback()
	_ = db.Close() // fenced
	got := queryFloats(t, db2, 0, 10_000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	if s := got[lset.String()]; len(s) != 1 || s[0] != (tsample{2000, 2}) {
		t.Fatalf("after the takeover: %v, want the acknowledged sample at 2000", got)
	}
}

// TestNewSeriesFromManyAppenders: series created at once by concurrent
// appenders (every series at a partition boundary) are recorded in ref
// order, whichever commit records them, and every acknowledged sample comes
// back after a crash, in the open partition and in the one before.
func TestNewSeriesFromManyAppenders(t *testing.T) {
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	db := openTestDB(t, b, opts)
	part := opts.PartitionDuration.Milliseconds()
	const writers, perWriter, perCommit = 8, 500, 50
	lset := func(w, i int) labels.Labels {
		return labels.FromStrings("__name__", "x", "w", strconv.Itoa(w), "i", strconv.Itoa(i))
	}
	var (
		mu    sync.Mutex
		acked = map[string][]tsample{}
	)
	scrape := func(ts int64) {
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo := 0; lo < perWriter; lo += perCommit {
					app := db.Appender(context.Background())
					// Half of each writer's series interleave with
					// another writer's, so that series are created by
					// one appender and committed first by another.
					for i := lo; i < lo+perCommit; i++ {
						owner := w
						if i%2 == 1 {
							owner = (w + 1) % writers
						}
						if _, err := app.Append(0, lset(owner, i), ts, float64(ts)); err != nil {
							errs <- err
							return
						}
					}
					if err := app.Commit(); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for i := lo; i < lo+perCommit; i++ {
						owner := w
						if i%2 == 1 {
							owner = (w + 1) % writers
						}
						k := lset(owner, i).String()
						if n := len(acked[k]); n == 0 || acked[k][n-1].t != ts {
							acked[k] = append(acked[k], tsample{ts, float64(ts)})
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	scrape(part - 1000) // the first partition
	scrape(part)        // every series again in the next one
	scrape(part + 1000)

	db2 := takeOver(t, b, opts)
	defer db2.Close()
	_ = db.Close() // fenced
	got := queryFloats(t, db2, 0, 2*part, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	if len(got) != len(acked) {
		t.Fatalf("%d series after the takeover, want %d", len(got), len(acked))
	}
	for k, want := range acked {
		if fmt.Sprint(got[k]) != fmt.Sprint(want) {
			t.Fatalf("series %s after the takeover: %v, want %v", k, got[k], want)
		}
	}
	// Each partition's forward index holds its series under refs 0 to n-1.
	for _, start := range []int64{0, part} {
		p, err := db2.loadPart(context.Background(), start, partitionMeta{})
		if err != nil {
			t.Fatalf("partition %d: %v", start, err)
		}
		if n := len(p.series); n != writers*perWriter {
			t.Fatalf("partition %d holds %d series in its forward index, want %d", start, n, writers*perWriter)
		}
	}
}

// TestUncommittedSeriesRecordedAtClose: a partition written out for good
// records the series that appenders created and never committed, so that
// its postings, which name them, never point at a missing forward-index
// entry.
func TestUncommittedSeriesRecordedAtClose(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	app := db.Appender(context.Background())
	kept := labels.FromStrings("__name__", "x", "job", "kept")
	if _, err := app.Append(0, kept, 1000, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	// Created after the last commit: no commit records it.
	abandoned := db.Appender(context.Background())
	if _, err := abandoned.Append(0, labels.FromStrings("__name__", "x", "job", "never"), 1000, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		t.Fatal(err)
	}
	_ = abandoned.Rollback()
	got, err := tryQueryFloats(db, 0, 10_000, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	if err != nil {
		t.Fatalf("query of the closed partition: %v", err)
	}
	n := 0
	for _, s := range got {
		n += len(s)
	}
	if n != 1 || len(got[kept.String()]) != 1 {
		t.Fatalf("from the closed partition: %v, want the one committed sample", got)
	}
	p, err := db.loadPart(context.Background(), 0, partitionMeta{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.series) != 2 {
		t.Fatalf("the closed partition's forward index holds %d series; its postings name 2", len(p.series))
	}
}
