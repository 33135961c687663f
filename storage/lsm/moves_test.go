package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// splitFirstByte is a Components.FlushSplit with one region per first byte.
func splitFirstByte(prev, key []byte) bool { return prev[0] != key[0] }

// putRange writes prefix-NNN = value for keys from to to-1 into b.
func putRange(b *Batch, prefix string, from, to int, value string) {
	for i := from; i < to; i++ {
		b.Put(fmt.Appendf(nil, "%s%03d", prefix, i), []byte(value))
	}
}

// writeAndFlush writes b and flushes it, failing if that waits a minute
// (a stall the test does not expect).
func writeAndFlush(t *testing.T, db *DB, b *Batch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.Write(ctx, b, db.DefaultWriteOptions()); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.Reset()
}

// checkRange fails unless every key prefix-NNN from from to to-1 reads value.
func checkRange(t *testing.T, db *DB, prefix string, from, to int, value string) {
	t.Helper()
	for i := from; i < to; i++ {
		k := fmt.Sprintf("%s%03d", prefix, i)
		if got, ok := mustGet(t, db, k); !ok || got != value {
			t.Fatalf("%s = %q,%v; want %q", k, got, ok, value)
		}
	}
}

// checkRunsSorted fails unless the tables of every run are in key order with
// disjoint ranges.
func checkRunsSorted(t *testing.T, m *manifest) {
	t.Helper()
	for _, r := range m.Runs {
		for i := 1; i < len(r.Tables); i++ {
			if bytes.Compare(r.Tables[i-1].LargestKey, r.Tables[i].SmallestKey) >= 0 {
				t.Fatalf("run %d: table %d [%q,%q] overlaps or precedes table %d [%q,%q]", r.ID,
					i-1, r.Tables[i-1].SmallestKey, r.Tables[i-1].LargestKey, i, r.Tables[i].SmallestKey, r.Tables[i].LargestKey)
			}
		}
	}
}

// TestFlushSplitsRegions flushes one memtable holding three regions: with
// Components.FlushSplit it becomes three L0 tables of disjoint ranges (L0
// one deep), without it one table. A split between every two keys makes a
// table a key, the two versions of one key in one table.
func TestFlushSplitsRegions(t *testing.T) {
	for _, c := range []struct {
		name   string
		split  func(prev, key []byte) bool
		tables int
	}{
		{"regions", splitFirstByte, 3},
		{"none", nil, 1},
		{"every-key", func(prev, key []byte) bool { return true }, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			comp := Components{FlushSplit: c.split}
			db, _ := openMemDB(t, testOptions(), comp)
			var b Batch
			putRange(&b, "a", 0, 100, "x")
			putRange(&b, "b", 0, 100, "y")
			putRange(&b, "c", 0, 100, "z")
			b.Put([]byte("b050"), []byte("y2")) // two versions of one key stay in one table
			writeAndFlush(t, db, &b)
			man := db.manifestNow()
			if len(man.L0) != c.tables {
				t.Fatalf("%d L0 tables, want %d", len(man.L0), c.tables)
			}
			for _, tm := range man.L0 {
				if c.split != nil && tm.SmallestKey[0] != tm.LargestKey[0] {
					t.Fatalf("table [%q,%q] spans regions", tm.SmallestKey, tm.LargestKey)
				}
			}
			if d := l0Depth(man.L0); d != 1 {
				t.Fatalf("L0 depth %d, want 1", d)
			}
			checkRange(t, db, "a", 0, 100, "x")
			checkRange(t, db, "b", 0, 50, "y")
			checkRange(t, db, "b", 51, 100, "y")
			checkRange(t, db, "c", 0, 100, "z")
			if got, _ := mustGet(t, db, "b050"); got != "y2" {
				t.Fatalf("b050 = %q, want y2", got)
			}
		})
	}
}

// TestCompactionMovesTablesNoOtherOverlaps compacts L0 tables of which two
// overlap (the b region, written twice) and the others do not: those are
// moved into the run (same object, nothing written), the b tables merged,
// and a table under the move size merged too; every key reads its newest
// value.
func TestCompactionMovesTablesNoOtherOverlaps(t *testing.T) {
	opts := testOptions()
	opts.TargetTableBytes = 4 << 10 // tables of 512 bytes and more move
	opts.L0CompactionTrigger = 1
	db, bucket := openMemDB(t, opts, Components{FlushSplit: splitFirstByte})
	var b Batch
	putRange(&b, "a", 0, 200, "a1")
	putRange(&b, "b", 0, 200, "b1")
	writeAndFlush(t, db, &b)
	putRange(&b, "b", 100, 300, "b2")
	putRange(&b, "c", 0, 200, "c2")
	b.Put([]byte("d"), []byte("d2")) // one small table
	writeAndFlush(t, db, &b)

	before := db.manifestNow()
	byFirst := map[byte][]tableMeta{}
	for _, tm := range before.L0 {
		byFirst[tm.SmallestKey[0]] = append(byFirst[tm.SmallestKey[0]], tm)
	}
	if len(before.L0) != 5 || len(byFirst['b']) != 2 || byFirst['d'][0].Size >= opts.TargetTableBytes/minMoveFraction {
		t.Fatalf("L0 before: %d tables (%d b tables; d table %d bytes); want 5, 2 and a small d table", len(before.L0), len(byFirst['b']), byFirst['d'][0].Size)
	}
	if d := l0Depth(before.L0); d != 2 {
		t.Fatalf("L0 depth %d before compaction, want 2 (the b tables)", d)
	}

	if err := db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := db.manifestNow()
	if len(after.L0) != 0 || len(after.Runs) != 1 {
		t.Fatalf("after: %d L0 tables, %d runs; want 0 and 1", len(after.L0), len(after.Runs))
	}
	checkRunsSorted(t, after)
	ids := map[string]bool{}
	for _, tm := range after.Runs[0].Tables {
		ids[tm.ID] = true
	}
	for _, r := range []byte{'a', 'c'} {
		if !ids[byFirst[r][0].ID] {
			t.Fatalf("the %c table was rewritten, not moved", r)
		}
	}
	for _, r := range []byte{'b', 'd'} {
		for _, tm := range byFirst[r] {
			if ids[tm.ID] {
				t.Fatalf("the %c table %s was moved; it should have been merged", r, tm.ID)
			}
		}
	}
	movedWant := float64(byFirst['a'][0].Size + byFirst['c'][0].Size)
	if got := testutil.ToFloat64(db.m.compactionMoved[laneL0]); got != movedWant {
		t.Fatalf("shale_lsm_compaction_moved_bytes_total{lane=l0} = %v, want %v", got, movedWant)
	}
	// The b tables merge into fewer bytes than they hold (keys b100-b199
	// twice); the a and c tables are not written again.
	merged := byFirst['b'][0].Size + byFirst['b'][1].Size + byFirst['d'][0].Size
	if got := testutil.ToFloat64(db.m.compactionBytes[laneL0]); got <= 0 || got > float64(merged) {
		t.Fatalf("shale_lsm_compaction_written_bytes_total{lane=l0} = %v: want more than 0, at most the b and d tables' %d bytes", got, merged)
	}
	checkRange(t, db, "a", 0, 200, "a1")
	checkRange(t, db, "b", 0, 100, "b1")
	checkRange(t, db, "b", 100, 300, "b2")
	checkRange(t, db, "c", 0, 200, "c2")
	if got, _ := mustGet(t, db, "d"); got != "d2" {
		t.Fatalf("d = %q, want d2", got)
	}

	// Reopened, the moved tables read the same.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, bucket, opts, Components{FlushSplit: splitFirstByte})
	defer db.Close()
	checkRange(t, db, "a", 0, 200, "a1")
	checkRange(t, db, "c", 0, 200, "c2")
}

// TestCompactionMergesTableATombstoneReaches: a range delete over part of a
// table no other overlaps must remove those keys when the table is
// compacted, so the table is merged, not moved.
func TestCompactionMergesTableATombstoneReaches(t *testing.T) {
	opts := testOptions()
	opts.TargetTableBytes = 4 << 10
	opts.L0CompactionTrigger = 1
	db, _ := openMemDB(t, opts, Components{FlushSplit: splitFirstByte})
	var b Batch
	putRange(&b, "a", 0, 200, "a1")
	putRange(&b, "b", 0, 200, "b1")
	writeAndFlush(t, db, &b)
	man := db.manifestNow()
	if err := db.DeleteRange(context.Background(), []byte("a050"), []byte("a060")); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := db.manifestNow()
	ids := after.tableIDs()
	for _, tm := range man.L0 {
		moved := ids[tm.ID]
		if tm.SmallestKey[0] == 'a' && moved {
			t.Fatal("the a table, which the range delete reaches, was moved")
		}
		if tm.SmallestKey[0] == 'b' && !moved {
			t.Fatal("the b table, which nothing overlaps, was rewritten")
		}
	}
	if len(after.Tombs) != 0 {
		t.Fatalf("%d range tombstones left after compacting every table they reach", len(after.Tombs))
	}
	checkRange(t, db, "a", 0, 50, "a1")
	checkRange(t, db, "a", 60, 200, "a1")
	for i := 50; i < 60; i++ {
		if got, ok := mustGet(t, db, fmt.Sprintf("a%03d", i)); ok {
			t.Fatalf("a%03d = %q after its range was deleted", i, got)
		}
	}
	checkRange(t, db, "b", 0, 200, "b1")
}

// TestWritesStallOnL0Depth holds the L0 lane and fills L0 with tables of
// disjoint ranges past L0StallTables: writes go on, L0 being one deep. Then
// four tables over one range make it L0StallTables deep and a write waits,
// until the lane runs again.
func TestWritesStallOnL0Depth(t *testing.T) {
	opts := testOptions()
	opts.L0CompactionTrigger = 2
	opts.L0StallTables = 4
	opts.CompactionInterval = time.Hour // background compaction on, kicked by flushes
	db, _ := openMemDB(t, opts, Components{})
	db.laneMu[laneL0].Lock()
	held := true
	defer func() {
		if held {
			db.laneMu[laneL0].Unlock()
		}
	}()
	var b Batch
	for i := range 6 {
		putRange(&b, fmt.Sprintf("d%d-", i), 0, 20, "v")
		writeAndFlush(t, db, &b)
	}
	if man := db.manifestNow(); len(man.L0) != 6 || l0Depth(man.L0) != 1 {
		t.Fatalf("%d L0 tables %d deep, want 6 and 1", len(man.L0), l0Depth(man.L0))
	}
	for i := range 4 {
		putRange(&b, "o-", 0, 20, fmt.Sprint(i))
		writeAndFlush(t, db, &b) // the fourth goes in at depth 3
	}
	if man := db.manifestNow(); l0Depth(man.L0) != 4 {
		t.Fatalf("L0 %d deep after four tables over one range, want 4", l0Depth(man.L0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	b.Put([]byte("late"), []byte("v"))
	if err := db.Write(ctx, &b, db.DefaultWriteOptions()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write at L0 depth 4 of 4: %v; want it to wait until its deadline", err)
	}
	held = false
	db.laneMu[laneL0].Unlock()
	kick(db.compKick)
	if err := db.Write(context.Background(), &b, db.DefaultWriteOptions()); err != nil {
		t.Fatalf("write once the L0 lane runs: %v", err)
	}
	if got, _ := mustGet(t, db, "o-005"); got != "3" {
		t.Fatalf("o-005 = %q, want 3", got)
	}
}

// TestPlanL0ByDepth: the L0 lane starts when L0 is L0CompactionTrigger
// deep, or holds L0StallTables tables, not at L0CompactionTrigger tables of
// disjoint ranges.
func TestPlanL0ByDepth(t *testing.T) {
	opts := DefaultOptions()
	opts.L0CompactionTrigger, opts.L0StallTables = 2, 8
	tm := func(lo, hi string) tableMeta {
		return tableMeta{ID: lo + hi, Size: 1 << 20, SmallestKey: []byte(lo), LargestKey: []byte(hi)}
	}
	m := &manifest{}
	for i := range 7 {
		m.L0 = append(m.L0, tm(fmt.Sprintf("d%d-a", i), fmt.Sprintf("d%d-z", i)))
	}
	if p := planCompaction(m, &opts, laneL0, nil); p != nil {
		t.Fatalf("7 disjoint L0 tables, trigger 2, stall 8: planned %v", p)
	}
	deep := &manifest{L0: append(slices.Clone(m.L0[:1]), tm("d0-m", "d0-n"))}
	if p := planCompaction(deep, &opts, laneL0, nil); p == nil || len(p.L0) != 2 {
		t.Fatalf("L0 two deep: planned %v, want both tables", p)
	}
	m.L0 = append(m.L0, tm("e-a", "e-z"))
	if p := planCompaction(m, &opts, laneL0, nil); p == nil || len(p.L0) != 8 {
		t.Fatalf("8 disjoint L0 tables, stall 8: planned %v, want all 8", p)
	}
}

func TestL0Depth(t *testing.T) {
	tm := func(lo, hi string) tableMeta { return tableMeta{SmallestKey: []byte(lo), LargestKey: []byte(hi)} }
	for _, c := range []struct {
		tables []tableMeta
		want   int
	}{
		{nil, 0},
		{[]tableMeta{tm("a", "z")}, 1},
		{[]tableMeta{tm("a", "b"), tm("c", "d"), tm("e", "f")}, 1},
		{[]tableMeta{tm("a", "c"), tm("c", "e")}, 2}, // closed ranges: c is in both
		{[]tableMeta{tm("a", "z"), tm("b", "c"), tm("d", "e"), tm("d", "d")}, 3},
		{[]tableMeta{tm("a", "b"), tm("a", "b"), tm("a", "b")}, 3},
		{[]tableMeta{tm("m", "n"), tm("a", "z"), tm("b", "c")}, 2},
	} {
		if got := l0Depth(c.tables); got != c.want {
			t.Errorf("l0Depth(%v) = %d, want %d", c.tables, got, c.want)
		}
	}
}
