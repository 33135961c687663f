package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The disk tier's byte layout (docs/cache.md has the diagrams).
//
// A segment file starts with a segment header:
//
//	magic "SHCSEG" (6) | version u16 | segment id u64          = 16 bytes
//
// followed by records, back to back:
//
//	crc32c u32 | class u8 | flags u8 | key length u16 | value length u32 | key | value
//
// All integers are little endian. The CRC-32C (Castagnoli) covers every byte
// of the record after the CRC field, so a flipped bit anywhere in the header,
// key or value, or a record cut short, fails the check.
const (
	segmentMagic      = "SHCSEG"
	segmentVersion    = 1
	segmentHeaderSize = 16
	recordHeaderSize  = 12
	maxKeyLen         = 1<<16 - 1
)

// ErrCorrupt marks bytes in the disk tier that fail validation: a bad
// checksum, an impossible length, a record cut short or a record that holds
// another key than the one asked for. The cache treats it as a miss.
var ErrCorrupt = errors.New("cache: corrupt disk tier data")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordSize is the encoded size of a record of key and value.
func recordSize(keyLen, valueLen int) int { return recordHeaderSize + keyLen + valueLen }

// appendRecord appends the encoding of one record to dst and returns it. The
// caller checks that key is at most maxKeyLen bytes and value fits in a u32.
func appendRecord(dst []byte, key string, value []byte, class Class) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0) // CRC, filled in below
	dst = append(dst, byte(class), 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(key)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(value)))
	dst = append(dst, key...)
	dst = append(dst, value...)
	binary.LittleEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst
}

// recordHeader is the fixed part of a record.
type recordHeader struct {
	crc      uint32
	class    Class
	keyLen   int
	valueLen int
}

// size is the encoded size of the whole record.
func (h recordHeader) size() int { return recordSize(h.keyLen, h.valueLen) }

// parseRecordHeader decodes a record header from the start of b. It checks
// what can be checked without the body: the class and flags.
func parseRecordHeader(b []byte) (recordHeader, error) {
	if len(b) < recordHeaderSize {
		return recordHeader{}, fmt.Errorf("record header of %d bytes: %w", len(b), ErrCorrupt)
	}
	h := recordHeader{
		crc:      binary.LittleEndian.Uint32(b[0:]),
		class:    Class(b[4]),
		keyLen:   int(binary.LittleEndian.Uint16(b[6:])),
		valueLen: int(binary.LittleEndian.Uint32(b[8:])),
	}
	if h.class != ClassData && h.class != ClassMeta {
		return recordHeader{}, fmt.Errorf("record class %d: %w", b[4], ErrCorrupt)
	}
	if b[5] != 0 {
		return recordHeader{}, fmt.Errorf("record flags %#x: %w", b[5], ErrCorrupt)
	}
	if h.keyLen == 0 {
		return recordHeader{}, fmt.Errorf("record with empty key: %w", ErrCorrupt)
	}
	return h, nil
}

// decodeRecord validates the whole record in b (exactly one record) and
// returns its key, value and class. The returned slices alias b.
func decodeRecord(b []byte) (key, value []byte, class Class, err error) {
	h, err := parseRecordHeader(b)
	if err != nil {
		return nil, nil, 0, err
	}
	if h.size() != len(b) {
		return nil, nil, 0, fmt.Errorf("record of %d bytes holds %d: %w", h.size(), len(b), ErrCorrupt)
	}
	if got := crc32.Checksum(b[4:], castagnoli); got != h.crc {
		return nil, nil, 0, fmt.Errorf("record checksum %#08x, want %#08x: %w", got, h.crc, ErrCorrupt)
	}
	key = b[recordHeaderSize : recordHeaderSize+h.keyLen]
	value = b[recordHeaderSize+h.keyLen:]
	return key, value, h.class, nil
}

// appendSegmentHeader appends the header of segment id to dst.
func appendSegmentHeader(dst []byte, id uint64) []byte {
	dst = append(dst, segmentMagic...)
	dst = binary.LittleEndian.AppendUint16(dst, segmentVersion)
	return binary.LittleEndian.AppendUint64(dst, id)
}

// parseSegmentHeader decodes a segment header and returns the segment id.
func parseSegmentHeader(b []byte) (uint64, error) {
	if len(b) < segmentHeaderSize {
		return 0, fmt.Errorf("segment header of %d bytes: %w", len(b), ErrCorrupt)
	}
	if string(b[:len(segmentMagic)]) != segmentMagic {
		return 0, fmt.Errorf("segment magic %q: %w", b[:len(segmentMagic)], ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[6:]); v != segmentVersion {
		return 0, fmt.Errorf("segment version %d: %w", v, ErrCorrupt)
	}
	return binary.LittleEndian.Uint64(b[8:]), nil
}
