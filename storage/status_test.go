package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

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
