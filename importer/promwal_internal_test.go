package importer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"

	"github.com/shaledb/shale/corrupt"
)

// appendWALRecord writes rec into seg as a Prometheus WAL writer does: cut
// into fragments that fit the pages, a page tail too short for a header
// left as zeros. flags is 0, fragSnappy or fragZstd (rec already
// compressed).
func appendWALRecord(seg, rec []byte, flags byte) []byte {
	for i := 0; i == 0 || len(rec) > 0; i++ {
		if left := walPageSize - len(seg)%walPageSize; left < walHeaderSize {
			seg = append(seg, make([]byte, left)...)
		}
		room := walPageSize - len(seg)%walPageSize - walHeaderSize
		part := rec[:min(len(rec), room)]
		rec = rec[len(part):]
		kind := byte(fragMiddle)
		switch {
		case i == 0 && len(rec) == 0:
			kind = fragFull
		case i == 0:
			kind = fragFirst
		case len(rec) == 0:
			kind = fragLast
		}
		seg = append(seg, kind|flags)
		seg = binary.BigEndian.AppendUint16(seg, uint16(len(part)))
		seg = binary.BigEndian.AppendUint32(seg, crc32.Checksum(part, walCRC))
		seg = append(seg, part...)
	}
	return seg
}

func walRecordsOf(t testing.TB, seg []byte, tail bool) ([][]byte, error) {
	t.Helper()
	var out [][]byte
	err := walSegmentRecords(seg, tail, func(rec []byte) error {
		out = append(out, bytes.Clone(rec))
		return nil
	})
	return out, err
}

func TestWALSegmentRecords(t *testing.T) {
	zenc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zenc.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 5000) // spans three pages
	recs := [][]byte{[]byte("a"), big, {}, bytes.Repeat([]byte{7}, walPageSize-2*walHeaderSize-1), []byte("snappy"), []byte("zstd")}
	var seg []byte
	for _, r := range recs[:4] {
		seg = appendWALRecord(seg, r, 0)
	}
	seg = appendWALRecord(seg, snappy.Encode(nil, recs[4]), fragSnappy)
	seg = appendWALRecord(seg, zenc.EncodeAll(recs[5], nil), fragZstd)

	got, err := walRecordsOf(t, seg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("got %d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if !bytes.Equal(got[i], recs[i]) {
			t.Errorf("record %d: got %d bytes, want %d", i, len(got[i]), len(recs[i]))
		}
	}

	// A padded final page, as a closed segment ends.
	padded := append(bytes.Clone(seg), make([]byte, walPageSize-len(seg)%walPageSize)...)
	if got, err := walRecordsOf(t, padded, false); err != nil || len(got) != len(recs) {
		t.Errorf("padded segment: %d records, %v", len(got), err)
	}

	// A torn write: the newest segment may end in one, no other may.
	torn := seg[:len(seg)-3]
	if got, err := walRecordsOf(t, torn, true); err != nil || len(got) != len(recs)-1 {
		t.Errorf("torn tail: %d records, %v", len(got), err)
	}
	if _, err := walRecordsOf(t, torn, false); !errors.Is(err, ErrCorrupt) || !errors.Is(err, corrupt.Err) {
		t.Errorf("torn record inside the WAL: %v, want corruption", err)
	}

	// A flipped byte fails the checksum, wherever the segment stands.
	bad := bytes.Clone(seg)
	bad[walHeaderSize] ^= 1
	if _, err := walRecordsOf(t, bad, true); !errors.Is(err, corrupt.Err) {
		t.Errorf("flipped byte: %v, want corruption", err)
	}

	// Non-zero bytes in a page's padding.
	junk := append(bytes.Clone(padded[:len(seg)]), 0, 0, 1)
	if _, err := walRecordsOf(t, junk, true); !errors.Is(err, corrupt.Err) {
		t.Errorf("junk in the padding: %v, want corruption", err)
	}

	// A last fragment with no first before it.
	orphan := appendWALRecord(nil, big, 0)
	orphan = orphan[walPageSize:]
	if _, err := walRecordsOf(t, orphan, true); !errors.Is(err, corrupt.Err) {
		t.Errorf("orphan fragment: %v, want corruption", err)
	}
}

// FuzzWALSegment: the bytes of a WAL segment give records or an error,
// never a panic; a segment cut short anywhere decodes as a tail.
func FuzzWALSegment(f *testing.F) {
	var seg []byte
	seg = appendWALRecord(seg, []byte{1, 2, 3}, 0)
	seg = appendWALRecord(seg, bytes.Repeat([]byte{9}, 40000), 0)
	seg = appendWALRecord(seg, snappy.Encode(nil, []byte("compressed record")), fragSnappy)
	f.Add(seg, true)
	f.Add(seg[:100], false)
	f.Add([]byte{fragFull | fragZstd, 0, 2, 0, 0, 0, 0, 1, 2}, true)
	f.Fuzz(func(t *testing.T, seg []byte, tail bool) {
		n := 0
		_ = walSegmentRecords(seg, tail, func(rec []byte) error {
			n += len(rec)
			return nil
		})
		if len(seg) > 0 {
			_ = walSegmentRecords(seg[:len(seg)/2], true, func([]byte) error { return nil })
		}
	})
}

// FuzzWALRecord: a WAL record of outside bytes is replayed or refused with
// an error, never a panic.
func FuzzWALRecord(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 8, '_', '_', 'n', 'a', 'm', 'e', '_', '_', 2, 'u', 'p'})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f})
	f.Add([]byte{3, 1, 1, 0, 10})
	f.Add([]byte{14, 0, 0, 0, 0, 0, 0, 0, 10})
	f.Fuzz(func(t *testing.T, rec []byte) {
		r := newHeadReader(0)
		if err := r.record(rec); err != nil && !errors.Is(err, corrupt.Err) {
			t.Fatalf("an error that is not marked as corruption: %v", err)
		}
		_ = r.series()
	})
}
