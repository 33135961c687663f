package lsm

import (
	"context"
	"testing"
)

// TestFlushDropsRangeDeletedEntries checks that keys written and deleted by a
// range tombstone before the memtable flush never reach the L0 table, while
// keys outside the range and keys written after the tombstone do.
func TestFlushDropsRangeDeletedEntries(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.WALEnabled = false
	opts.CompactionInterval, opts.GCInterval, opts.MemtableMaxAge = 0, 0, 0
	db, _ := openMemDB(t, opts, Components{})
	var batch Batch
	for _, k := range []string{"log/1", "log/2", "log/3", "keep/1"} {
		batch.Put([]byte(k), []byte("value of "+k))
	}
	batch.DeleteRange([]byte("log/"), []byte("log0"))
	batch.Put([]byte("log/4"), []byte("after the tombstone"))
	if err := db.Write(ctx, &batch, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.commitMu.Lock()
	l0 := db.man.L0
	db.commitMu.Unlock()
	if len(l0) != 1 || l0[0].NumEntries != 2 {
		t.Fatalf("L0 after flush: %+v, want one table of 2 entries (keep/1, log/4)", l0)
	}
	for k, want := range map[string]string{"log/1": "", "log/3": "", "keep/1": "value of keep/1", "log/4": "after the tombstone"} {
		v, ok, err := db.Get(ctx, []byte(k))
		if err != nil || ok != (want != "") || string(v) != want {
			t.Fatalf("Get %s = %q, %v, %v; want %q", k, v, ok, err, want)
		}
	}
}
