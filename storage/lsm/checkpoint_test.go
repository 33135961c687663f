package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// TestCheckpointKeepsItsTables writes, checkpoints, then overwrites, deletes
// and compacts everything away with garbage collection at zero grace: the
// checkpoint still reads as it was (its tables stay), the writer reads the
// new state, and once the checkpoint is deleted the next collection frees
// the tables only it kept.
func TestCheckpointKeepsItsTables(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	opts.GCGracePeriod, opts.WALGCGracePeriod = 0, 0
	opts.L0CompactionTrigger, opts.SizeRatio = 1, 100 // compact into one run
	db, b := openMemDB(t, opts, Components{})
	for i := range 200 {
		if err := db.Put(ctx, roundKey(i), fmt.Appendf(nil, "old%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The last ten are only in the memtable (and WAL): the checkpoint
	// flushes them.
	for i := 200; i < 210; i++ {
		if err := db.Put(ctx, roundKey(i), fmt.Appendf(nil, "old%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := db.Checkpoint(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "before" || info.Tables == 0 || info.Bytes == 0 {
		t.Fatalf("checkpoint info %+v", info)
	}
	if _, err := db.Checkpoint(ctx, "before"); !errors.Is(err, ErrCheckpointExists) {
		t.Fatalf("second checkpoint of the same name: %v, want ErrCheckpointExists", err)
	}
	for _, bad := range []string{"", "../x", "a/b", "-x", "x y", string(make([]byte, 129))} {
		if _, err := db.Checkpoint(ctx, bad); err == nil {
			t.Errorf("checkpoint named %q was taken", bad)
		}
	}

	for i := range 210 {
		if i%2 == 0 {
			err = db.Delete(ctx, roundKey(i))
		} else {
			err = db.Put(ctx, roundKey(i), []byte("new"))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	cm, err := db.s.readCheckpoint(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for id := range cm.tableIDs() {
		if !db.manifestNow().tableIDs()[id] {
			kept++
			if _, err := b.Attributes(ctx, db.s.paths.sst(id)); err != nil {
				t.Fatalf("table %s of the checkpoint: %v", id, err)
			}
		}
	}
	if kept == 0 {
		t.Fatal("the compaction left every table of the checkpoint in the manifest: nothing tested")
	}

	check := func(r interface {
		Get(context.Context, []byte) ([]byte, bool, error)
	}, what string, want func(i int) (string, bool)) {
		t.Helper()
		for i := range 210 {
			v, ok := mustGet(t, r, string(roundKey(i)))
			if wv, wok := want(i); v != wv || ok != wok {
				t.Fatalf("%s: key %d = %q %v, want %q %v", what, i, v, ok, wv, wok)
			}
		}
	}
	old := func(i int) (string, bool) { return fmt.Sprintf("old%d", i), true }
	cr, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond, Checkpoint: "before"}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	check(cr, "checkpoint reader", old)
	check(db, "writer", func(i int) (string, bool) {
		if i%2 == 0 {
			return "", false
		}
		return "new", true
	})

	list, err := ListCheckpoints(ctx, b, "db")
	if err != nil || len(list) != 1 || list[0].Name != "before" || list[0].Tables != info.Tables || list[0].Created.IsZero() {
		t.Fatalf("ListCheckpoints = %+v, %v", list, err)
	}
	tablesBefore := countObjects(t, b, "db/sst/")
	if err := DeleteCheckpoint(ctx, b, "db", "before"); err != nil {
		t.Fatal(err)
	}
	if err := DeleteCheckpoint(ctx, b, "db", "before"); !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("deleting a missing checkpoint: %v, want ErrNoCheckpoint", err)
	}
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
	if after := countObjects(t, b, "db/sst/"); after >= tablesBefore {
		t.Fatalf("tables after the checkpoint's deletion: %d, before %d: none freed", after, tablesBefore)
	}
}

// TestCheckpointCopy copies a checkpoint to another bucket, refuses to copy
// over a database, and opens a writer on the copy that reads the
// checkpoint's data and takes new writes.
func TestCheckpointCopy(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	db, b := openMemDB(t, opts, Components{})
	for i := range 300 {
		if err := db.Put(ctx, roundKey(i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if err := db.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.Checkpoint(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := db.Put(ctx, roundKey(0), []byte("later")); err != nil {
		t.Fatal(err)
	}

	dst := objstore.NewMemoryBucket()
	st, err := CopyCheckpoint(ctx, b, "db", "c1", dst, "copy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tables == 0 || st.Bytes == 0 {
		t.Fatalf("copy stats %+v", st)
	}
	if _, err := CopyCheckpoint(ctx, b, "db", "c1", dst, "copy", nil); !errors.Is(err, ErrDestinationNotEmpty) {
		t.Fatalf("copy over a database: %v, want ErrDestinationNotEmpty", err)
	}
	if _, err := CopyCheckpoint(ctx, b, "db", "nosuch", dst, "other", nil); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("copy of a missing checkpoint: %v, want ErrNoCheckpoint", err)
	}

	w, err := Open(ctx, dst, "copy", opts, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 300 {
		if v, ok := mustGet(t, w, string(roundKey(i))); !ok || v != fmt.Sprintf("v%d", i) {
			t.Fatalf("copy: key %d = %q %v", i, v, ok)
		}
	}
	if err := w.Put(ctx, roundKey(1000), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, w, string(roundKey(1000))); !ok || v != "x" {
		t.Fatalf("write to the copy: %q %v", v, ok)
	}
}

func countObjects(t *testing.T, b objstore.Bucket, prefix string) int {
	t.Helper()
	page, err := b.List(context.Background(), prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Objects)
}

// TestCheckpointUnreadableStopsGC puts a damaged checkpoint in the store:
// garbage collection deletes nothing and names it, rather than free tables
// it might keep, and goes on once it is deleted.
func TestCheckpointUnreadableStopsGC(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	opts.GCGracePeriod, opts.WALGCGracePeriod = 0, 0
	db, b := openMemDB(t, opts, Components{})
	if _, err := objstore.PutBytes(ctx, b, "db/checkpoints/bad.manifest", []byte("not a manifest"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := db.CollectGarbage(ctx)
	if err == nil || !strings.Contains(err.Error(), "checkpoints/bad.manifest") || n != 0 {
		t.Fatalf("collection with a damaged checkpoint: %d deleted, %v", n, err)
	}
	if _, err := ListCheckpoints(ctx, b, "db"); err == nil {
		t.Fatal("ListCheckpoints took a damaged checkpoint")
	}
	if err := DeleteCheckpoint(ctx, b, "db", "bad"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CollectGarbage(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointUnderFaults takes checkpoints and copies them with a fifth
// of the store's requests failing, before or after they take effect (a
// put that lands but answers an error): every checkpoint is written once
// and every copy opens as the database it was, without an error surfacing
// from the retries.
func TestCheckpointUnderFaults(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := newFaultBucket(mem, 11)
	opts := testOptions()
	db := openDB(t, fb, opts, Components{})
	defer db.Close()
	fb.setFailProb(0.2)
	for round := range 4 {
		for i := range 50 {
			if err := db.Put(ctx, roundKey(i), fmt.Appendf(nil, "r%d-%d", round, i)); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("c%d", round)
		if _, err := db.Checkpoint(ctx, name); err != nil {
			t.Fatalf("checkpoint %s: %v", name, err)
		}
		dst := newFaultBucket(objstore.NewMemoryBucket(), uint64(round))
		dst.setFailProb(0.2)
		if _, err := CopyCheckpoint(ctx, fb, "db", name, dst, "db", nil); err != nil {
			t.Fatalf("copy %s: %v", name, err)
		}
		dst.setFailProb(0)
		r, err := OpenReader(ctx, dst, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			if v, ok := mustGet(t, r, string(roundKey(i))); !ok || v != fmt.Sprintf("r%d-%d", round, i) {
				t.Fatalf("copy of %s: key %d = %q %v", name, i, v, ok)
			}
		}
		r.Close()
	}
	fb.setFailProb(0)
	list, err := ListCheckpoints(ctx, fb, "db")
	if err != nil || len(list) != 4 {
		t.Fatalf("checkpoints %+v, %v", list, err)
	}
}
