package lsm

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	ctx := context.Background()
	opts := testOptions()
	opts.WALEnabled = true
	db, b := openMemDB(t, opts, Components{})
	st := db.Status()
	if st.WriterEpoch != 1 || len(st.L0) != 0 || len(st.Runs) != 0 {
		t.Fatalf("new DB: %+v", st)
	}
	for i := range 100 {
		if err := db.Put(ctx, fmt.Appendf(nil, "k%03d", i), []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	st = db.Status()
	if st.MemtableEntries < 100 || st.MemtableBytes <= 0 || st.LastWAL == 0 {
		t.Fatalf("after 100 puts: %+v", st)
	}
	man := st.Manifest
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st = db.Status()
	if st.Manifest <= man || len(st.L0) != 1 || st.L0[0].Entries != 100 || st.L0[0].Bytes <= 0 || string(st.L0[0].SmallestKey) != "k000" || string(st.L0[0].LargestKey) != "k099" {
		t.Fatalf("after a flush: %+v", st)
	}
	if st.MemtableEntries != 0 || st.LastSeq < 100 {
		t.Fatalf("after a flush: memtable %d entries, last seq %d", st.MemtableEntries, st.LastSeq)
	}
	if err := db.Put(ctx, []byte("k200"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	st = db.Status()
	var runBytes, tableBytes int64
	for _, r := range st.Runs {
		runBytes += r.Bytes
		for _, tb := range r.Tables {
			tableBytes += tb.Bytes
		}
	}
	if st.Compacting || runBytes != tableBytes {
		t.Fatalf("after compaction: %+v", st)
	}
	if st.Compactions > 0 && (len(st.Runs) == 0 || len(st.L0) != 0) {
		t.Fatalf("%d compactions yet %d L0 tables and %d runs", st.Compactions, len(st.L0), len(st.Runs))
	}

	before := time.Now()
	r, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond, ReplayWAL: true}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rs := r.Status()
	if rs.Manifest != st.Manifest || rs.WriterEpoch != st.WriterEpoch || rs.RefreshedAt.Before(before) || len(rs.L0) != len(st.L0) || len(rs.Runs) != len(st.Runs) {
		t.Fatalf("reader status %+v, writer %+v", rs, st)
	}
}
