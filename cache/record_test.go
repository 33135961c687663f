package cache

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		value []byte
		class Class
	}{
		{"data", "obj/000001.sst#4096", []byte("block bytes"), ClassData},
		{"meta", "obj/000001.sst#0", bytes.Repeat([]byte{0xff}, 1000), ClassMeta},
		{"empty value", "k", nil, ClassData},
		{"longest key", string(bytes.Repeat([]byte{'k'}, maxKeyLen)), []byte{1}, ClassMeta},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix")
			b := appendRecord(prefix, tt.key, tt.value, tt.class)
			if !bytes.Equal(b[:len(prefix)], prefix) {
				t.Fatalf("appendRecord changed the bytes before it")
			}
			rec := b[len(prefix):]
			if len(rec) != recordSize(len(tt.key), len(tt.value)) {
				t.Fatalf("record is %d bytes, recordSize says %d", len(rec), recordSize(len(tt.key), len(tt.value)))
			}
			k, v, class, err := decodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if string(k) != tt.key || !bytes.Equal(v, tt.value) || class != tt.class {
				t.Fatalf("decoded %q %q %v, want %q %q %v", k, v, class, tt.key, tt.value, tt.class)
			}
		})
	}
}

func TestDecodeRecordRejectsDamage(t *testing.T) {
	good := appendRecord(nil, "key-1", []byte("value-1"), ClassData)
	tests := []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"flipped crc", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"flipped class", func(b []byte) []byte { b[4] ^= 1; return b }},
		{"bad class", func(b []byte) []byte { b[4] = 7; return b }},
		{"flags set", func(b []byte) []byte { b[5] = 1; return b }},
		{"flipped key length", func(b []byte) []byte { b[6] ^= 1; return b }},
		{"flipped value length", func(b []byte) []byte { b[8] ^= 1; return b }},
		{"flipped key byte", func(b []byte) []byte { b[recordHeaderSize] ^= 0x20; return b }},
		{"flipped value byte", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }},
		{"truncated value", func(b []byte) []byte { return b[:len(b)-1] }},
		{"truncated header", func(b []byte) []byte { return b[:recordHeaderSize-1] }},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }},
		{"empty", func(b []byte) []byte { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.damage(bytes.Clone(good))
			_, _, _, err := decodeRecord(b)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeRecord of damaged record: err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestScanSegment(t *testing.T) {
	seg := appendSegmentHeader(nil, 7)
	keys := []string{"a", "bb", "ccc"}
	for i, k := range keys {
		seg = appendRecord(seg, k, bytes.Repeat([]byte{byte(i)}, 10*i), Class(i%2))
	}
	recs, err := scanRecords(bytes.NewReader(seg), int64(len(seg)), 7)
	if err != nil {
		t.Fatal(err)
	}
	// A finished segment has a footer, and reads the same from it.
	if _, err := scanSegment(bytes.NewReader(seg), int64(len(seg)), 7); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("segment without a footer: err = %v, want ErrCorrupt", err)
	}
	finished := appendFooter(bytes.Clone(seg), recs, uint32(len(seg)))
	fromFooter, err := scanSegment(bytes.NewReader(finished), int64(len(finished)), 7)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fromFooter, recs) {
		t.Fatalf("footer gives %v, records %v", fromFooter, recs)
	}
	for cut := len(finished) - 1; cut >= len(seg); cut-- {
		got, err := scanSegment(bytes.NewReader(finished[:cut]), int64(cut), 7)
		if !errors.Is(err, ErrCorrupt) || !slices.Equal(got, recs) {
			t.Fatalf("footer cut at %d: %d records, err %v; want all and ErrCorrupt", cut, len(got), err)
		}
	}

	if len(recs) != len(keys) {
		t.Fatalf("found %d records, want %d", len(recs), len(keys))
	}
	for i, r := range recs {
		k, _, class, err := decodeRecord(seg[r.loc.off : r.loc.off+r.loc.size])
		if err != nil || string(k) != keys[i] || class != r.loc.class || class != Class(i%2) {
			t.Fatalf("record %d: key %q class %v err %v", i, k, class, err)
		}
	}

	boundaries := map[int]int{segmentHeaderSize: 0} // cut -> records before it
	for i, r := range recs {
		boundaries[int(r.loc.off+r.loc.size)] = i + 1
	}
	for cut := len(seg) - 1; cut >= segmentHeaderSize; cut-- {
		got, err := scanRecords(bytes.NewReader(seg[:cut]), int64(cut), 7)
		whole, atBoundary := boundaries[cut]
		switch {
		case atBoundary && (err != nil || len(got) != whole):
			t.Fatalf("cut at record boundary %d: %d records, err %v; want %d, no error", cut, len(got), err, whole)
		case !atBoundary && !errors.Is(err, ErrCorrupt):
			t.Fatalf("cut at %d: err = %v, want ErrCorrupt", cut, err)
		}
		for _, r := range got {
			if int(r.loc.off+r.loc.size) > cut {
				t.Fatalf("cut at %d: record at %d+%d kept", cut, r.loc.off, r.loc.size)
			}
		}
	}
	if _, err := scanSegment(bytes.NewReader(finished), int64(len(finished)), 8); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("segment with another id: err = %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder, which sees
// what a disk tier file holds: it must fail cleanly or decode something that
// encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, "key", []byte("value"), ClassData))
	f.Add(appendRecord(nil, "obj/1.sst#0", nil, ClassMeta))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, v, class, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		if got := appendRecord(nil, string(k), v, class); !bytes.Equal(got, b) {
			t.Fatalf("re-encoding %x gives %x", b, got)
		}
	})
}

// FuzzScanSegment feeds arbitrary bytes to the segment scan run on open.
func FuzzScanSegment(f *testing.F) {
	seg := appendSegmentHeader(nil, 1)
	seg = appendRecord(seg, "key", []byte("value"), ClassData)
	f.Add(seg)
	f.Add(appendRecord(seg, "meta", []byte("m"), ClassMeta))
	f.Add(appendSegmentHeader(nil, 1))
	if recs, err := scanRecords(bytes.NewReader(seg), int64(len(seg)), 1); err == nil {
		f.Add(appendFooter(bytes.Clone(seg), recs, uint32(len(seg))))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := scanSegment(bytes.NewReader(b), int64(len(b)), 1)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not marked corrupt: %v", err)
		}
		end := int64(segmentHeaderSize)
		for _, r := range recs {
			if int64(r.loc.off) != end || int64(r.loc.off)+int64(r.loc.size) > int64(len(b)) {
				t.Fatalf("record at %d+%d in %d bytes, expected at %d", r.loc.off, r.loc.size, len(b), end)
			}
			end += int64(r.loc.size)
		}
	})
}
