package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"

	"github.com/shaledb/shale/storage/lsm"
)

func TestPartitionsAndLSMStatus(t *testing.T) {
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	db, b := openMemDB(t, opts)
	hour := time.Hour.Milliseconds()
	base := time.Now().Truncate(time.Hour).UnixMilli() - 2*hour
	a := labels.FromStrings("__name__", "up", "job", "a")
	c := labels.FromStrings("__name__", "up", "job", "c")
	appendFloats(t, db, a, tsample{base + 1000, 1}, tsample{base + hour + 1000, 2})
	appendFloats(t, db, c, tsample{base + hour + 2000, 3})
	ps, err := db.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []PartitionStatus{
		{Start: base, End: base + hour, Head: true, Series: 1},
		{Start: base + hour, End: base + 2*hour, Head: true, Series: 2},
	}
	if len(ps) != len(want) {
		t.Fatalf("partitions %+v, want %+v", ps, want)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("partition %d: %+v, want %+v", i, ps[i], want[i])
		}
	}
	if !db.WALEnabled() {
		t.Error("WALEnabled false with the WAL on")
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := db.LSMStatus(); len(st.L0)+len(st.Runs) == 0 || st.WriterEpoch != 1 {
		t.Fatalf("LSM status after a flush: %+v", st)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ro, err := openReadOnlyOn(context.Background(), b, "tsdb", opts, lsm.DefaultReaderOptions(), nil, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ps, err = ro.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Start != base || ps[1].Start != base+hour {
		t.Fatalf("reader's partitions: %+v", ps)
	}
	if st := ro.LSMStatus(); st.RefreshedAt.IsZero() || st.WriterEpoch == 0 {
		t.Fatalf("reader's LSM status: %+v", st)
	}
}

// TestHeadBlocks counts the head's blocks as /api/v1/status/tsdb reports
// them (chunkCount): one for a series' open samples, one more for a block
// sealed at a change of sample kind and for out-of-order samples; none once
// a flush has written the head out.
func TestHeadBlocks(t *testing.T) {
	db, _ := openMemDB(t, DefaultOptions())
	if n := db.HeadBlocks(); n != 0 {
		t.Fatalf("empty head: %d blocks", n)
	}
	base := time.Now().Truncate(time.Minute).UnixMilli() - time.Minute.Milliseconds()
	a := labels.FromStrings("__name__", "a")
	k := labels.FromStrings("__name__", "k")
	o := labels.FromStrings("__name__", "o")
	appendFloats(t, db, a, tsample{base + 1000, 1}, tsample{base + 2000, 2})
	appendFloats(t, db, k, tsample{base + 1000, 1})
	app := db.Appender(context.Background())
	if _, err := app.AppendHistogram(0, k, base+2000, tsdbutil.GenerateTestHistogram(1), nil); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	appendFloats(t, db, o, tsample{base + 10000, 1})
	appendFloats(t, db, o, tsample{base + 5000, 2}) // out of order, within the window
	if n := db.HeadBlocks(); n != 5 {
		t.Fatalf("%d blocks, want 5: a 1, k 2 (float, histogram), o 2 (in order, out of order)", n)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := db.HeadBlocks(); n != 0 {
		t.Fatalf("%d blocks after a flush, want 0", n)
	}
	appendFloats(t, db, a, tsample{base + 3000, 3})
	if n := db.HeadBlocks(); n != 1 {
		t.Fatalf("%d blocks after another sample, want 1", n)
	}
}
