package lsm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shaledb/shale/storage/objstore"
)

// pendingRecords returns the records in the WAL object being filled and the
// number of objects sealed and not yet acknowledged.
func pendingRecords(db *DB) (filling, sealed int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.walCur.n, len(db.walQueue) + len(db.walFlight)
}

// TestWALEarlyObject: with WALMinInterval set and the flush interval an
// hour away, the WAL object being filled waits while an announced record
// (ExpectLog) is on its way and goes as soon as none is, by the last record
// appended or by a withdrawal; early objects are WALMinInterval apart; the
// records replay in order.
func TestWALEarlyObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := logOptions()
	o.WALFlushInterval = time.Hour
	o.WALMinInterval = 30 * time.Millisecond
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, o, Components{})

	db.ExpectLog()
	db.ExpectLog()
	wa, err := db.AppendExpectedLog([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if filling, sealed := pendingRecords(db); filling != 1 || sealed != 0 || isDone(wa) {
		t.Fatalf("one writer still on its way: %d records filling, %d objects sealed, done %v; want 1, 0, false", filling, sealed, isDone(wa))
	}
	wb, err := db.AppendExpectedLog([]byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []LogWait{wa, wb} {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("early object not written: %v", err)
		}
	}
	if wa.buf != wb.buf {
		t.Fatal("records of one group in two objects")
	}
	db.mu.Lock()
	firstSealed := db.walSealedAt
	db.mu.Unlock()

	// The next early object waits for WALMinInterval after the first.
	db.ExpectLog()
	wc, err := db.AppendExpectedLog([]byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	gap := db.walSealedAt.Sub(firstSealed)
	db.mu.Unlock()
	if gap < o.WALMinInterval {
		t.Fatalf("early objects %s apart, want at least %s", gap, o.WALMinInterval)
	}

	// A withdrawn announcement lets the object go.
	db.ExpectLog()
	db.ExpectLog()
	wd, err := db.AppendExpectedLog([]byte("d"))
	if err != nil {
		t.Fatal(err)
	}
	if filling, _ := pendingRecords(db); filling != 1 || isDone(wd) {
		t.Fatalf("before the withdrawal: %d records filling, done %v; want 1, false", filling, isDone(wd))
	}
	db.CancelLog()
	if err := wd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if early, interval := testutil.ToFloat64(db.m.walSealed[sealEarly]), testutil.ToFloat64(db.m.walSealed[sealInterval]); early != 3 || interval != 0 {
		t.Fatalf("shale_lsm_wal_objects_total: early %g, interval %g; want 3, 0", early, interval)
	}
	crash(db)
	db = openDB(t, b, o, Components{})
	defer db.Close()
	if got, want := replayed(t, db), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("replayed after a crash %q, want %q", got, want)
	}
}

// TestWALNoEarlyObjectWhenOff: without WALMinInterval an announced record
// waits for the flush interval (here an hour) even once nothing else is
// on its way.
func TestWALNoEarlyObjectWhenOff(t *testing.T) {
	o := logOptions()
	o.WALFlushInterval = time.Hour
	db, _ := openMemDB(t, o, Components{})
	db.ExpectLog()
	w, err := db.AppendExpectedLog([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	db.ExpectLog()
	db.CancelLog()
	if filling, sealed := pendingRecords(db); filling != 1 || sealed != 0 || isDone(w) {
		t.Fatalf("%d records filling, %d objects sealed, done %v; want 1, 0, false", filling, sealed, isDone(w))
	}
	// LogMark seals it; then it is written as usual.
	db.LogMark()
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if early, sync := testutil.ToFloat64(db.m.walSealed[sealEarly]), testutil.ToFloat64(db.m.walSealed[sealSync]); early != 0 || sync != 1 {
		t.Fatalf("shale_lsm_wal_objects_total: early %g, sync %g; want 0, 1", early, sync)
	}
}
