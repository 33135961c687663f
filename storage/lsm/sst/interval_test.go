package sst

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/shaledb/shale/cache/cachetest"
)

// spanValue is a merge operand holding the interval [lo, hi], as
// spanInterval reads it.
func spanValue(lo, hi int64) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(lo))
	return binary.BigEndian.AppendUint64(v, uint64(hi))
}

// spanInterval maps the operands of keys starting with "s" to the interval
// their value holds, and nothing else.
func spanInterval(key, v []byte) (Interval, bool) {
	if len(key) == 0 || key[0] != 's' || len(v) != 16 {
		return Interval{}, false
	}
	return Interval{int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))}, true
}

// intervalEntries is a table's worth of entries: the keys s0000-s0399 each
// with three merge operands, of [0, 99], [100, 199] and [200, 299] by key
// (s0100-s0199 all [100, 199], and so on), and among them a Put (s0050), a
// Delete (s0060), a key not mapped (x...) and an operand not mapped.
func intervalEntries() []Entry {
	var es []Entry
	for i := range 400 {
		k := []byte(fmt.Sprintf("s%04d", i))
		lo := int64(i/100) * 100
		switch i {
		case 50:
			es = append(es, Entry{Key: k, Seq: 3, Kind: KindPut, Value: spanValue(lo, lo+99)})
		case 60:
			es = append(es, Entry{Key: k, Seq: 3, Kind: KindDelete})
		case 70:
			es = append(es, Entry{Key: k, Seq: 3, Kind: KindMerge, Value: []byte("not an interval")})
		}
		for s := range 3 {
			es = append(es, Entry{Key: k, Seq: uint64(2 - s), Kind: KindMerge, Value: spanValue(lo+int64(s)*10, lo+int64(s)*10+9)})
		}
		if i == 150 {
			es = append(es, Entry{Key: []byte("s0150x"), Seq: 1, Kind: KindPut, Value: []byte("v")})
		}
	}
	return es
}

func buildIntervalTable(t *testing.T, es []Entry, f IntervalFunc) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BlockSize: 256, BloomBitsPerKey: 10, Compression: CompressionNone})
	w.SetInterval(f)
	for _, e := range es {
		if err := w.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestIntervalSkipsBlocks: an iterator given an interval reads no data block
// whose entries are all mapped merge operands outside it, and sees every
// entry of the other blocks; a block with a Put, a Delete or an entry not
// mapped is read whatever its operands.
func TestIntervalSkipsBlocks(t *testing.T) {
	es := intervalEntries()
	data := buildIntervalTable(t, es, spanInterval)
	ctx := context.Background()
	// The block of each entry.
	blockOf := map[string]int{}
	tb := openTable(t, data, nil)
	it := tb.NewIter(ctx, nil, nil)
	for ok := it.First(); ok; ok = it.Next() {
		e := it.Entry()
		blockOf[fmt.Sprintf("%s/%d", e.Key, e.Seq)] = it.bi
	}
	if err := it.Close(); err != nil || len(blockOf) != len(es) {
		t.Fatalf("%d entries of %d read (%v)", len(blockOf), len(es), err)
	}
	for _, iv := range []Interval{{100, 199}, {250, 255}, {1000, 2000}, {-5, -1}} {
		t.Run(fmt.Sprintf("%d-%d", iv.Lo, iv.Hi), func(t *testing.T) {
			tb, r := openCounted(t, data, nil)
			r.reset()
			it := tb.NewIter(ctx, nil, nil)
			it.SetInterval(iv)
			seen := map[string]bool{}
			for ok := it.First(); ok; ok = it.Next() {
				e := it.Entry()
				seen[fmt.Sprintf("%s/%d", e.Key, e.Seq)] = true
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			_, read := r.stats()
			var needed int64
			for i, h := range tb.ix.handles {
				if !tb.ix.skips(i, &iv) {
					needed += h.len
				}
			}
			if read != needed {
				t.Errorf("read %d bytes of data blocks, want the %d of the blocks not skipped", read, needed)
			}
			if read >= tb.info.DataSize/2 {
				t.Errorf("read %d of %d bytes of data blocks", read, tb.info.DataSize)
			}
			for _, e := range es {
				id := fmt.Sprintf("%s/%d", e.Key, e.Seq)
				skipped := tb.ix.skips(blockOf[id], &iv)
				if seen[id] == skipped {
					t.Errorf("%s seen %v, its block skipped %v", id, seen[id], skipped)
				}
				m, mapped := spanInterval(e.Key, e.Value)
				if skipped && (e.Kind != KindMerge || !mapped || m.Overlaps(iv)) {
					t.Errorf("%s (%v, %v, mapped %v) skipped", id, e.Kind, m, mapped)
				}
			}
		})
	}
}

// TestIntervalPrefetch: a range iterator given an interval loads only the
// blocks it reads, a run of adjacent ones in one read, and CachedWithin then
// holds while Cached does not.
func TestIntervalPrefetch(t *testing.T) {
	data := buildIntervalTable(t, intervalEntries(), spanInterval)
	ctx := context.Background()
	c := cachetest.NewMap()
	tb, r := openCounted(t, data, c)
	iv := Interval{300, 399}
	lower, upper := []byte("s0000"), []byte("s9999")
	if tb.CachedWithin(lower, upper, iv) {
		t.Fatal("cold table cached")
	}
	r.reset()
	it := tb.NewRangeIter(ctx, lower, upper)
	it.SetInterval(iv)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n < 300 {
		t.Fatalf("%d entries, want the 300 of s0300-s0399 at least", n)
	}
	// One read per run of adjacent blocks kept (those of s0300-s0399 and
	// the few that hold a Put, a Delete or an entry not mapped).
	runs, kept := 0, false
	for i := range tb.ix.handles {
		k := !tb.ix.skips(i, &iv)
		if k && !kept {
			runs++
		}
		kept = k
	}
	if reads, _ := r.stats(); reads != runs || runs > 6 {
		t.Errorf("%d reads, want one per run of blocks kept, %d", reads, runs)
	}
	if !tb.CachedWithin(lower, upper, iv) {
		t.Error("the blocks read are not all cached")
	}
	if tb.Cached(lower, upper) {
		t.Error("blocks the iterator skipped were loaded")
	}
	r.reset()
	if err := tb.PrefetchWithin(ctx, lower, upper, iv); err != nil {
		t.Fatal(err)
	}
	if reads, _ := r.stats(); reads != 0 {
		t.Errorf("prefetch of cached blocks read %d times", reads)
	}
}

// TestIntervalWithoutFunc: a table written without an IntervalFunc records
// no interval, so an iterator given one reads everything.
func TestIntervalWithoutFunc(t *testing.T) {
	es := intervalEntries()
	tb := openTable(t, buildIntervalTable(t, es, nil), nil)
	it := tb.NewIter(context.Background(), nil, nil)
	it.SetInterval(Interval{1000, 2000})
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != len(es) {
		t.Fatalf("%d entries, want %d", n, len(es))
	}
}

// TestReadsVersion2: a table of format version 2 (testdata/version2.sst,
// written before index entries held intervals: keys k0000-k0299, each a
// merge operand "value-<i>-merge" at seq 1000+i over a Put "value-<i>-put"
// at seq i+1) is read whole, with or without an interval.
func TestReadsVersion2(t *testing.T) {
	data, err := os.ReadFile("testdata/version2.sst")
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(data[len(data)-12:]); v != 2 {
		t.Fatalf("testdata/version2.sst has version %d", v)
	}
	tb := openTable(t, data, nil)
	it := tb.NewIter(context.Background(), nil, nil)
	it.SetInterval(Interval{0, 0})
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		e := it.Entry()
		k, want := i/2, fmt.Sprintf("value-%d-merge", i/2)
		if i%2 == 1 {
			want = fmt.Sprintf("value-%d-put", k)
		}
		if string(e.Key) != fmt.Sprintf("k%04d", k) || string(e.Value) != want {
			t.Fatalf("entry %d: %q = %q, want k%04d = %q", i, e.Key, e.Value, k, want)
		}
		i++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if i != 600 {
		t.Fatalf("%d entries, want 600", i)
	}
	got, err := tb.Get(context.Background(), []byte("k0123"), nil)
	if err != nil || len(got) != 2 || string(got[1].Value) != "value-123-put" {
		t.Fatalf("Get k0123: %v, %v", got, err)
	}
}
