package lsm

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkMemtableAdd inserts entries of the size a head flush of many
// series writes (a 16-byte key, small values) and reports the heap a
// memtable holds per entry beyond its key and value.
//
//	go test -run '^$' -bench BenchmarkMemtableAdd -count 6 ./storage/lsm/
func BenchmarkMemtableAdd(b *testing.B) {
	for _, valueLen := range []int{16, 100} {
		b.Run(fmt.Sprintf("value=%d", valueLen), func(b *testing.B) {
			const perTable = 1 << 18
			value := make([]byte, valueLen)
			key := make([]byte, 16)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m := newMemtable(time.Unix(0, 0))
			var seq uint64
			b.ReportAllocs()
			for b.Loop() {
				if seq%perTable == 0 && seq > 0 {
					m = newMemtable(time.Unix(0, 0))
				}
				seq++
				binary.BigEndian.PutUint64(key, seq*0x9e3779b97f4a7c15)
				binary.BigEndian.PutUint64(key[8:], seq)
				m.add(entry{key: key, value: value, seq: seq, kind: kindPut})
			}
			n := m.count.Load()
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			b.ReportMetric(held/float64(n)-float64(len(key)+valueLen), "overhead-bytes/entry")
			runtime.KeepAlive(m)
		})
	}
}

func TestMemtableEntriesRoundTrip(t *testing.T) {
	m := newMemtable(time.Unix(0, 0))
	big := make([]byte, arenaChunk)
	for i := range big {
		big[i] = byte(i)
	}
	in := []entry{
		{key: []byte("a"), value: []byte("1"), seq: 1, kind: kindPut},
		{key: []byte("a"), value: []byte("22"), seq: 3, kind: kindMerge},
		{key: []byte("b"), seq: 2, kind: kindDelete},
		{key: []byte{}, value: []byte{}, seq: 4, kind: kindPut},
		{key: []byte("c"), value: big, seq: 5, kind: kindPut},
	}
	for _, e := range in {
		m.add(e)
	}
	want := []entry{in[3], in[1], in[0], in[2], in[4]}
	it := memIter{m: m}
	i := 0
	for ok := it.seekGE(nil); ok; ok = it.next() {
		got := it.entry()
		w := want[i]
		if string(got.key) != string(w.key) || string(got.value) != string(w.value) || got.seq != w.seq || got.kind != w.kind {
			t.Fatalf("entry %d = %q/%d %v len %d, want %q/%d %v len %d", i, got.key, got.seq, got.kind, len(got.value), w.key, w.seq, w.kind, len(w.value))
		}
		if cap(got.key) != len(got.key) {
			t.Fatalf("entry %d: key has spare capacity %d: appending to it would overwrite the value", i, cap(got.key)-len(got.key))
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("%d entries, want %d", i, len(want))
	}
	if got := m.get([]byte("a"), 2, nil); len(got) != 1 || string(got[0].value) != "1" {
		t.Fatalf("get a at seq 2: %v", got)
	}
}

// TestMemtableSeekUnderInsert: a reader seeking a key while the writer
// inserts smaller keys right before it must land on the key. Each insert
// becomes the key's predecessor; a seek that loads the predecessor's link
// again after comparing returned the new, smaller node, so a Get reported an
// acknowledged key missing.
func TestMemtableSeekUnderInsert(t *testing.T) {
	m := newMemtable(time.Unix(0, 0))
	target := []byte("b")
	m.add(entry{key: target, value: []byte("v"), seq: 1, kind: kindPut})
	const inserts = 100000
	done := make(chan struct{})
	go func() {
		defer close(done)
		key := make([]byte, 9)
		key[0] = 'a'
		for i := 0; i < inserts; i++ {
			binary.BigEndian.PutUint64(key[1:], uint64(i))
			m.add(entry{key: key, seq: uint64(i) + 2, kind: kindPut})
		}
	}()
	misses, seeks := 0, 0
	for running := true; running; seeks++ {
		select {
		case <-done:
			running = false
		default:
		}
		if got := m.get(target, 1, nil); len(got) != 1 {
			misses++
		}
		if n := m.seek(target, ^uint64(0)); n == nil || string(n.e.key()) != "b" {
			misses++
		}
	}
	if misses > 0 {
		t.Fatalf("%d of %d seeks of %q, under inserts before it, landed elsewhere", misses, 2*seeks, target)
	}
}
