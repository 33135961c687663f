package lsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

func logOptions() Options {
	o := testOptions()
	o.KeepLog = true
	return o
}

func logRecords(t *testing.T, db *DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := db.Log(context.Background(), []byte(fmt.Sprintf("rec%04d", i))); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
}

func replayed(t *testing.T, db *DB) []string {
	t.Helper()
	var got []string
	err := db.ReplayLog(context.Background(), func(rec []byte) error {
		got = append(got, string(rec))
		return nil
	})
	if err != nil {
		t.Fatalf("replay log: %v", err)
	}
	return got
}

func wantRecords(from, to int) []string {
	var want []string
	for i := from; i < to; i++ {
		want = append(want, fmt.Sprintf("rec%04d", i))
	}
	return want
}

// TestLogReplayAndTruncate: log records survive a crash, stay out of the
// keyspace and tables, and after TruncateLog only later records replay.
func TestLogReplayAndTruncate(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, logOptions(), Components{})
	writeKeys(t, db, "k", 10)
	logRecords(t, db, 0, 20)
	// Memtable flushes move the replay position past the log's objects;
	// the log must still replay.
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	crash(db)

	db = openDB(t, b, logOptions(), Components{})
	if got := replayed(t, db); !slices.Equal(got, wantRecords(0, 20)) {
		t.Fatalf("replayed after crash: %q", got)
	}
	it, err := db.NewIterator(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := countKeys(it)
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("keyspace holds %d keys, want the 10 written (log records must stay out)", n)
	}
	logRecords(t, db, 20, 30)
	mark := db.LogMark()
	logRecords(t, db, 30, 35)
	if err := db.TruncateLog(ctx, mark); err != nil {
		t.Fatal(err)
	}
	crash(db)

	db = openDB(t, b, logOptions(), Components{})
	defer db.Close()
	if got := replayed(t, db); !slices.Equal(got, wantRecords(30, 35)) {
		t.Fatalf("replayed after truncate: %q", got)
	}
}

// TestLogKeepsWALFromGC: WAL objects with log records not truncated survive
// garbage collection after their writes reached tables; once truncated
// they go after the grace period.
func TestLogKeepsWALFromGC(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	clock := newFakeClock()
	db := openDB(t, b, logOptions(), Components{Clock: clock})
	logRecords(t, db, 0, 5)
	flushKeys(t, db, "k", 10)
	clock.Advance(time.Hour)
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	crash(db)
	db = openDB(t, b, logOptions(), Components{Clock: clock})
	if got := replayed(t, db); !slices.Equal(got, wantRecords(0, 5)) {
		t.Fatalf("replayed after gc: %q", got)
	}
	if err := db.TruncateLog(ctx, db.LogMark()); err != nil {
		t.Fatal(err)
	}
	flushKeys(t, db, "j", 10)
	walsBefore := len(listNames(t, b, "db/wal/"))
	clock.Advance(time.Hour)
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	man := db.viewp.Load().man
	for _, name := range listNames(t, b, "db/wal/") {
		if id, _ := db.s.paths.parseWAL(name); id <= man.walKeepAfter() {
			t.Fatalf("wal %s at or below %d survived (had %d objects)", name, man.walKeepAfter(), walsBefore)
		}
	}
	crash(db)
	db = openDB(t, b, logOptions(), Components{Clock: clock})
	defer db.Close()
	if got := replayed(t, db); len(got) != 0 {
		t.Fatalf("replayed after truncate and gc: %q", got)
	}
}

// TestLogWithoutKeepLog: without KeepLog the log position follows the
// replay position, so plain users of the LSM keep no extra WAL objects.
func TestLogWithoutKeepLog(t *testing.T) {
	db, _ := openMemDB(t, testOptions(), Components{})
	flushKeys(t, db, "k", 10)
	man := db.viewp.Load().man
	if man.LogAfter != man.ReplayAfter || man.ReplayAfter == 0 {
		t.Fatalf("log after %d, replay after %d", man.LogAfter, man.ReplayAfter)
	}
}

func TestLogNeedsWAL(t *testing.T) {
	opts := logOptions()
	opts.WALEnabled = false
	db, _ := openMemDB(t, opts, Components{})
	if err := db.Log(context.Background(), []byte("x")); !errors.Is(err, ErrNoWAL) {
		t.Fatalf("log without WAL: %v", err)
	}
}

// TestReaderReadLog: a reader sees log records in order from a position,
// and the truncation point once the writer truncates.
func TestReaderReadLog(t *testing.T) {
	ctx := context.Background()
	db, b := openMemDB(t, logOptions(), Components{})
	logRecords(t, db, 0, 10)
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{ReplayWAL: true, RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	read := func(from LogPos) ([]string, LogPos, uint64) {
		t.Helper()
		var got []string
		next := from
		after, err := rdr.ReadLog(from, func(pos LogPos, rec []byte) error {
			if pos.Less(next) {
				t.Fatalf("position %v before %v", pos, next)
			}
			next = LogPos{WAL: pos.WAL, Index: pos.Index + 1}
			got = append(got, string(rec))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, next, after
	}
	got, next, _ := read(LogPos{})
	if !slices.Equal(got, wantRecords(0, 10)) {
		t.Fatalf("reader log: %q", got)
	}
	logRecords(t, db, 10, 15)
	if err := rdr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _, _ = read(next); !slices.Equal(got, wantRecords(10, 15)) {
		t.Fatalf("reader log after refresh: %q", got)
	}
	mark := db.LogMark()
	logRecords(t, db, 15, 17)
	if err := db.TruncateLog(ctx, mark); err != nil {
		t.Fatal(err)
	}
	if err := rdr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, after := read(LogPos{})
	if after != mark || !slices.Equal(got, wantRecords(15, 17)) {
		t.Fatalf("reader log after truncate: after %d (mark %d), %q", after, mark, got)
	}
}

// TestManifestV1LogPosition: a manifest of format 1 (no log position)
// decodes with the log truncated at its replay position.
func TestManifestV1LogPosition(t *testing.T) {
	m := &manifest{WriterEpoch: 3, LastSeq: 9, ReplayAfter: 7, NextRunID: 2}
	v2 := appendManifest(nil, m)
	// Format 1 is format 2 without the trailing log position (one byte
	// here) and with version 1.
	v1 := append([]byte(nil), v2[:len(v2)-5]...)
	v1[len(manifestMagic)] = manifestFmtV1
	v1 = finishWAL(v1) // the same CRC framing as a WAL object
	got, err := decodeManifest(v1)
	if err != nil {
		t.Fatal(err)
	}
	if got.LogAfter != 7 || got.ReplayAfter != 7 {
		t.Fatalf("v1 manifest: log after %d, replay after %d", got.LogAfter, got.ReplayAfter)
	}
	m.LogAfter = 4
	got, err = decodeManifest(appendManifest(nil, m))
	if err != nil || got.LogAfter != 4 {
		t.Fatalf("v2 round trip: %+v, %v", got, err)
	}
}

// TestSkipWAL: a write that skips the WAL is lost by a crash before Flush
// while a later logged write survives; after Flush it is durable.
func TestSkipWAL(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, testOptions(), Components{})
	if err := db.Write(ctx, batchOf("bulk", []byte("1")), WriteOptions{SkipWAL: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Write(ctx, batchOf("logged", []byte("2")), WriteOptions{AwaitDurable: true}); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, db, "bulk"); !ok || v != "1" {
		t.Fatalf("bulk before the crash: %q,%v", v, ok)
	}
	crash(db)
	db = openDB(t, b, testOptions(), Components{})
	if _, ok := mustGet(t, db, "bulk"); ok {
		t.Fatal("a write that skipped the WAL survived a crash before Flush")
	}
	if v, ok := mustGet(t, db, "logged"); !ok || v != "2" {
		t.Fatalf("logged write after the crash: %q,%v", v, ok)
	}
	if err := db.Write(ctx, batchOf("bulk", []byte("3")), WriteOptions{SkipWAL: true}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	crash(db)
	db = openDB(t, b, testOptions(), Components{})
	defer db.Close()
	if v, ok := mustGet(t, db, "bulk"); !ok || v != "3" {
		t.Fatalf("bulk after Flush and a crash: %q,%v", v, ok)
	}
}

// lateLister is a bucket whose listings leave out the objects hide names,
// as a store that lists new objects late.
type lateLister struct {
	objstore.Bucket
	hide func(name string) bool
}

func (b lateLister) List(ctx context.Context, prefix, startAfter string, limit int) (objstore.ListPage, error) {
	p, err := b.Bucket.List(ctx, prefix, startAfter, limit)
	p.Objects = slices.DeleteFunc(p.Objects, func(a objstore.Attributes) bool { return b.hide(a.Name) })
	return p, err
}

// TestReplayDoesNotTrustLateListings: a writer restarted after a crash on a
// store that does not list its newest WAL objects yet replays them all the
// same, writes and log records: the claim of the WAL finds every object up
// to its fence, listed or not, and the replay reads what the claim found.
func TestReplayDoesNotTrustLateListings(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	db := openDB(t, mem, logOptions(), Components{})
	for i := range 20 {
		if err := db.Put(ctx, fmt.Appendf(nil, "k%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
		logRecords(t, db, i, i+1)
	}
	crash(db)
	page, err := mem.List(ctx, "db/wal/", "", 0)
	if err != nil || len(page.Objects) < 4 {
		t.Fatalf("%d wal objects, %v; want several", len(page.Objects), err)
	}
	late := map[string]bool{}
	for _, o := range page.Objects[len(page.Objects)-3:] {
		late[o.Name] = true
	}
	db = openDB(t, lateLister{mem, func(name string) bool { return late[name] }}, logOptions(), Components{})
	defer db.Close()
	for i := range 20 {
		if _, ok := mustGet(t, db, fmt.Sprintf("k%02d", i)); !ok {
			t.Errorf("k%02d, acknowledged, is gone: its WAL object was not listed yet", i)
		}
	}
	if got := replayed(t, db); !slices.Equal(got, wantRecords(0, 20)) {
		t.Errorf("log replayed %q, want all 20 records", got)
	}
}

// TestOpenDoesNotTrustLateManifestListings: a writer opened on a store that
// does not list the newest manifest yet opens on it all the same (before, it
// lost every race to write the next version and failed to open) and sees
// the tables it names.
func TestOpenDoesNotTrustLateManifestListings(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	db := openDB(t, mem, testOptions(), Components{})
	writeKeys(t, db, "k", 10)
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	page, err := mem.List(ctx, "db/manifest/", "", 0)
	if err != nil || len(page.Objects) < 2 {
		t.Fatalf("%d manifests, %v; want two or more", len(page.Objects), err)
	}
	late := map[string]bool{page.Objects[len(page.Objects)-1].Name: true} // the flush's
	db, err = Open(ctx, lateLister{mem, func(name string) bool { return late[name] }}, "db", testOptions(), Components{Merge: concatMerge})
	if err != nil {
		t.Fatalf("open with the newest manifests not listed yet: %v", err)
	}
	defer db.Close()
	for i := range 10 {
		if _, ok := mustGet(t, db, fmt.Sprintf("k%04d", i)); !ok {
			t.Errorf("k%04d gone", i)
		}
	}
}

// A restarted writer reads each WAL object once: the log records of the
// objects its replay read are kept for ReplayLog, which reads only the
// objects before the replay position, and the records come back the same,
// in order. Past keptLogBytes the objects are read again.
func TestReplayLogReadsReplayedObjectsOnce(t *testing.T) {
	whole := keptLogBytes
	for _, budget := range []int64{whole, 300} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			defer func(b int64) { keptLogBytes = b }(keptLogBytes)
			keptLogBytes = budget
			ctx := context.Background()
			fb := objstore.NewFaultBucket(objstore.NewMemoryBucket())
			db := openDB(t, fb, logOptions(), Components{})
			logRecords(t, db, 0, 10)
			writeKeys(t, db, "k", 5)
			if err := db.Flush(ctx); err != nil { // the replay position passes the first records
				t.Fatal(err)
			}
			logRecords(t, db, 10, 30)
			writeKeys(t, db, "m", 5)
			crash(db)

			var mu sync.Mutex
			reads := map[string]int{}
			fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpGet}, Match: func(_ objstore.Op, name string) bool {
				if strings.Contains(name, "/wal/") {
					mu.Lock()
					reads[name]++
					mu.Unlock()
				}
				return false
			}})
			db = openDB(t, fb, logOptions(), Components{})
			defer db.Close()
			if got := replayed(t, db); !slices.Equal(got, wantRecords(0, 30)) {
				t.Fatalf("replayed: %q", got)
			}
			mu.Lock()
			defer mu.Unlock()
			var once, twice int
			for name, n := range reads {
				switch n {
				case 1:
					once++
				case 2:
					twice++
				default:
					t.Fatalf("%s read %d times", name, n)
				}
			}
			if budget == whole && twice > 0 || budget < whole && (twice == 0 || once == 0) || once+twice < 20 {
				t.Fatalf("WAL objects read once %d, twice %d (budget %d)", once, twice, budget)
			}
		})
	}
}
