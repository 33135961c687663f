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

// TestReadWALsInOrder: WAL objects read ahead in parallel reach fn in id
// order whatever order their reads finish in; a failed read or fn ends the
// walk with its error and leaves no read running.
func TestReadWALsInOrder(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	fb := objstore.NewFaultBucket(mem)
	m, _ := newMetrics(nil) // a nil registry registers nothing and cannot fail
	s := newStore(fb, "db", nil, m, nil, time.Millisecond, time.Millisecond)
	const n = 40
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i + 1)
		e := entry{kind: kindPut, seq: uint64(i + 1), key: []byte(fmt.Sprintf("k%02d", i)), value: []byte("v")}
		obj := finishWAL(appendWALRecord(appendWALHeader(nil, 1), &e))
		if err := s.putIfAbsent(ctx, "wal", s.paths.wal(ids[i]), obj, false); err != nil {
			t.Fatal(err)
		}
	}
	// Every read takes a while: several are in flight at once and finish in
	// any order.
	fb.SetOpLatency(objstore.OpGet, 2*time.Millisecond)
	var got []uint64
	err := s.readWALs(ctx, ids, func(id, _ uint64, ents []entry) error {
		if len(ents) != 1 || ents[0].seq != id {
			return fmt.Errorf("object %d holds %v", id, ents)
		}
		got = append(got, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != ids[i] {
			t.Fatalf("objects reached fn in order %v", got)
		}
	}
	if len(got) != n {
		t.Fatalf("%d of %d objects", len(got), n)
	}

	boom := errors.New("boom")
	fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpGet}, Err: boom,
		Match: func(_ objstore.Op, name string) bool { return strings.HasSuffix(name, s.paths.wal(17)) }})
	got = got[:0]
	err = s.readWALs(ctx, ids, func(id, _ uint64, _ []entry) error { got = append(got, id); return nil })
	if !errors.Is(err, boom) || len(got) != 16 {
		t.Fatalf("a failed read: err %v after %d objects; want boom after 16", err, len(got))
	}
	fb.ClearFaults()
	stop := errors.New("stop")
	err = s.readWALs(ctx, ids, func(id, _ uint64, _ []entry) error {
		if id == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
}

// TestWALReadWindow: small WAL objects are read many at once, large ones
// few, so that what a replay holds stays near walReadAheadBytes.
func TestWALReadWindow(t *testing.T) {
	for _, c := range []struct{ largest, want int }{
		{0, walReadAheadMin},        // nothing applied yet
		{4 << 10, walReadAheadMax},  // a light load's objects
		{1 << 20, 64},               // 64 MiB / 1 MiB
		{4 << 20, 16},               // 64 MiB / 4 MiB
		{8 << 20, walReadAheadMin},  // WALMaxBytes: at least the minimum
		{64 << 20, walReadAheadMin}, // larger than the budget
	} {
		if got := walReadWindow(c.largest); got != c.want {
			t.Errorf("walReadWindow(%d) = %d, want %d", c.largest, got, c.want)
		}
	}
}
