package lsm

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/shaledb/shale/storage/objstore"
)

// walCurArray returns the backing array of the WAL object being filled.
func walCurArray(db *DB) *byte {
	db.mu.Lock()
	defer db.mu.Unlock()
	return unsafe.SliceData(db.walCur.data)
}

// TestWALBufferReuse: once a WAL object is stored and acknowledged, its
// buffer fills a later object; the later object holds only its own records
// (a large object's bytes past a small one's end are not written), so replay
// gives each record once.
func TestWALBufferReuse(t *testing.T) {
	ctx := context.Background()
	o := logOptions()
	o.WALFlushInterval = time.Hour // objects go by LogMark only
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, o, Components{})

	big := bytes.Repeat([]byte("x"), 64<<10)
	var first *byte
	write := func(rec []byte) {
		t.Helper()
		w, err := db.AppendLog(rec)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = walCurArray(db)
		}
		db.LogMark()
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(big) // stored and acknowledged: its buffer is free
	write([]byte("b"))
	// The object sealed after the first one's acknowledgement took its buffer.
	if got := walCurArray(db); got != first {
		t.Fatal("the WAL object being filled does not reuse the stored object's buffer")
	}
	write([]byte("c"))

	crash(db)
	db = openDB(t, b, o, Components{})
	defer db.Close()
	if got, want := replayed(t, db), []string{string(big), "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %d records (%d bytes in the first), want 3: %q... ", len(got), len(got[0]), got[min(1, len(got)-1):])
	}
}
