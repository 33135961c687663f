package lsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleManifest() *manifest {
	t1 := tableMeta{ID: "0000018c2f3a4b5c0123456789abcdef", Size: 4096, NumEntries: 10, SmallestKey: []byte("a"), LargestKey: []byte("m"), MinSeq: 1, MaxSeq: 10, MetaSize: 300}
	t2 := tableMeta{ID: "0000018c2f3a4b5cfedcba9876543210", Size: 8192, NumEntries: 20, SmallestKey: []byte("b"), LargestKey: []byte("z"), MinSeq: 11, MaxSeq: 40, MetaSize: 512}
	return &manifest{
		WriterEpoch: 3, LastSeq: 41, ReplayAfter: 7, NextRunID: 2,
		L0:    []tableMeta{t2},
		Runs:  []sortedRun{{ID: 1, Tables: []tableMeta{t1}}},
		Tombs: []rangeTomb{{start: []byte("c"), end: []byte("d"), seq: 41}},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	for _, m := range []*manifest{{}, sampleManifest()} {
		data := appendManifest([]byte("prefix"), m)
		got, err := decodeManifest(data[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		want := m
		if len(want.L0) == 0 {
			want = &manifest{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

func TestWALRoundTrip(t *testing.T) {
	ents := []entry{
		{kind: kindPut, seq: 1, key: []byte("k"), value: []byte("v")},
		{kind: kindDelete, seq: 2, key: []byte("k"), value: []byte{}},
		{kind: kindMerge, seq: 3, key: []byte(""), value: []byte("op")},
		{kind: kindRangeDelete, seq: 4, key: []byte("a"), value: []byte("b")},
	}
	obj := appendWALHeader(nil, 300)
	for i := range ents {
		obj = appendWALRecord(obj, &ents[i])
	}
	obj = finishWAL(obj)
	epoch, got, err := decodeWAL(obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if epoch != 300 || !reflect.DeepEqual(got, ents) {
		t.Fatalf("round trip: epoch %d\n got %+v\nwant %+v", epoch, got, ents)
	}
}

// TestWALV2Read: an SHW2 object (no epoch) reads as epoch 0 with its
// records.
func TestWALV2Read(t *testing.T) {
	e := entry{kind: kindPut, seq: 7, key: []byte("k"), value: []byte("v")}
	v2 := finishWAL(appendWALRecord([]byte(walMagicV2), &e))
	epoch, got, err := decodeWAL(v2, nil)
	if err != nil || epoch != 0 || len(got) != 1 || got[0].seq != 7 {
		t.Fatalf("SHW2 object: epoch %d, %+v, %v", epoch, got, err)
	}
	if epoch, got, err := decodeWAL(finishWAL([]byte(walMagicV2)), nil); err != nil || epoch != 0 || len(got) != 0 {
		t.Fatalf("empty SHW2 object (an old fence): epoch %d, %+v, %v", epoch, got, err)
	}
}

// TestOldWALRefused: an SHW1 object (whose records carried an expire-at
// varint) is refused, checksum intact, rather than misread.
func TestOldWALRefused(t *testing.T) {
	v1 := []byte("SHW1")
	v1 = append(v1, byte(kindPut), 1, 0, 1, 'k', 1, 'v') // kind, seq, expire at 0, key, value
	if _, _, err := decodeWAL(finishWAL(v1), nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("SHW1 object: err %v, want ErrCorrupt", err)
	}
}

// TestDecodersRejectDamage flips every byte and truncates at every length:
// each damaged object must give ErrCorrupt.
func TestDecodersRejectDamage(t *testing.T) {
	e := entry{kind: kindPut, seq: 9, key: []byte("key"), value: []byte("value")}
	wal := finishWAL(appendWALRecord(appendWALHeader(nil, 5), &e))
	man := appendManifest(nil, sampleManifest())
	decoders := map[string]struct {
		data   []byte
		decode func([]byte) error
	}{
		"wal":      {wal, func(b []byte) error { _, _, err := decodeWAL(b, nil); return err }},
		"manifest": {man, func(b []byte) error { _, err := decodeManifest(b); return err }},
	}
	for name, d := range decoders {
		for i := range d.data {
			bad := bytes.Clone(d.data)
			bad[i] ^= 0x41
			if err := d.decode(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s with byte %d flipped: err = %v", name, i, err)
			}
			if err := d.decode(d.data[:i]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s truncated to %d: err = %v", name, i, err)
			}
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add(appendManifest(nil, sampleManifest()))
	f.Add(appendManifest(nil, &manifest{}))
	logged := sampleManifest()
	logged.LogAfter = logged.ReplayAfter / 2
	f.Add(appendManifest(nil, logged))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkManifestDecode(t, data)
		// Also with a valid frame, so the fuzzer reaches the body's parser.
		framed := append([]byte(manifestMagic), data...)
		checkManifestDecode(t, finishWAL(framed))
	})
}

func checkManifestDecode(t *testing.T, data []byte) {
	m, err := decodeManifest(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not marked corrupt: %v", err)
		}
		return
	}
	// What decodes must survive a re-encoding unchanged.
	again, err := decodeManifest(appendManifest(nil, m))
	if err != nil || !reflect.DeepEqual(again, m) {
		t.Fatalf("re-encoding changed the manifest: %v", err)
	}
}

func FuzzDecodeWAL(f *testing.F) {
	e := entry{kind: kindMerge, seq: 5, key: []byte("k"), value: []byte("operand")}
	f.Add(finishWAL(appendWALRecord(appendWALHeader(nil, 1), &e)))
	f.Add(finishWAL(appendWALHeader(nil, 1<<40)))
	lg := entry{kind: kindLog, value: []byte("log record")}
	f.Add(finishWAL(appendWALRecord(appendWALRecord(appendWALHeader(nil, 3), &e), &lg)))
	f.Add(finishWAL(appendWALRecord([]byte(walMagicV2), &e)))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkWALDecode(t, data)
		checkWALDecode(t, finishWAL(append([]byte(walMagic), data...)))
	})
}

func checkWALDecode(t *testing.T, data []byte) {
	epoch, ents, err := decodeWAL(data, nil)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not marked corrupt: %v", err)
		}
		return
	}
	obj := appendWALHeader(nil, epoch)
	for i := range ents {
		obj = appendWALRecord(obj, &ents[i])
	}
	againEpoch, again, err := decodeWAL(finishWAL(obj), nil)
	if err != nil || againEpoch != epoch || !reflect.DeepEqual(again, ents) {
		t.Fatalf("re-encoding changed the records: %v", err)
	}
}
