package cache

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/shaledb/shale/corrupt"
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
// A finished segment ends with an index footer, so that opening the tier
// reads a few bytes per record instead of every record:
//
//	entry * count: key xxhash u64 | offset u32 | size u32 | class u8   (17 bytes each)
//	trailer:       records end u32 | count u32 | crc32c u32 | reserved u32 | magic "SHCINDEX"
//
// The trailer's CRC-32C covers the entries and the first 8 trailer bytes.
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

	footerMagic     = "SHCINDEX"
	footerEntrySize = 17
	trailerSize     = 24
)

// ErrCorrupt marks bytes in the disk tier that fail validation: a bad
// checksum, an impossible length, a record cut short or a record that holds
// another key than the one asked for. The cache treats it as a miss. It
// wraps corrupt.Err.
var ErrCorrupt = corrupt.New("cache: corrupt disk tier data")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordSize is the encoded size of a record of key and value.
func recordSize(keyLen, valueLen int) int { return recordHeaderSize + keyLen + valueLen }

// appendRecord appends the encoding of one record to dst and returns it. The
// caller checks that key is at most maxKeyLen bytes and value fits in a u32.
func appendRecord(dst []byte, key string, value []byte, class Class) []byte {
	return append(appendRecordHead(dst, key, value, class), value...)
}

// appendRecordHead appends the encoding of one record up to its value (the
// header, whose CRC covers the value too, and the key), so that a writer
// need not copy a large value.
func appendRecordHead(dst []byte, key string, value []byte, class Class) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0) // CRC, filled in below
	dst = append(dst, byte(class), 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(key)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(value)))
	dst = append(dst, key...)
	crc := crc32.Update(crc32.Checksum(dst[start+4:], castagnoli), castagnoli, value)
	binary.LittleEndian.PutUint32(dst[start:], crc)
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

// footerSize is the size of the index footer of count records.
func footerSize(count int) int { return count*footerEntrySize + trailerSize }

// appendFooter appends the index footer of recs, whose records end at
// recordsEnd, to dst.
func appendFooter(dst []byte, recs []scannedRecord, recordsEnd uint32) []byte {
	start := len(dst)
	for _, r := range recs {
		dst = binary.LittleEndian.AppendUint64(dst, r.hash)
		dst = binary.LittleEndian.AppendUint32(dst, r.loc.off)
		dst = binary.LittleEndian.AppendUint32(dst, r.loc.size)
		dst = append(dst, byte(r.loc.class))
	}
	dst = binary.LittleEndian.AppendUint32(dst, recordsEnd)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(recs)))
	crc := crc32.Checksum(dst[start:], castagnoli)
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return append(dst, footerMagic...)
}

// parseTrailer decodes the last trailerSize bytes of a segment of size bytes
// and returns where the footer starts and how many entries it has.
func parseTrailer(b []byte, size int64) (footerStart int64, recordsEnd uint32, count int, err error) {
	if len(b) != trailerSize {
		return 0, 0, 0, fmt.Errorf("trailer of %d bytes: %w", len(b), ErrCorrupt)
	}
	if string(b[16:]) != footerMagic {
		return 0, 0, 0, fmt.Errorf("no index footer: %w", ErrCorrupt)
	}
	recordsEnd = binary.LittleEndian.Uint32(b[0:])
	count = int(binary.LittleEndian.Uint32(b[4:]))
	footerStart = size - int64(footerSize(count))
	if int64(count) > size/footerEntrySize || footerStart != int64(recordsEnd) || recordsEnd < segmentHeaderSize {
		return 0, 0, 0, fmt.Errorf("footer of %d entries after records ending at %d in %d bytes: %w", count, recordsEnd, size, ErrCorrupt)
	}
	return footerStart, recordsEnd, count, nil
}

// parseFooter decodes a whole index footer (entries and trailer) of segment
// id and checks that its entries tile the records region exactly.
func parseFooter(b []byte, id uint64, recordsEnd uint32, count int) ([]scannedRecord, error) {
	if len(b) != footerSize(count) {
		return nil, fmt.Errorf("footer of %d bytes for %d entries: %w", len(b), count, ErrCorrupt)
	}
	crcAt := count*footerEntrySize + 8
	if got, want := crc32.Checksum(b[:crcAt], castagnoli), binary.LittleEndian.Uint32(b[crcAt:]); got != want {
		return nil, fmt.Errorf("footer checksum %#08x, want %#08x: %w", got, want, ErrCorrupt)
	}
	recs := make([]scannedRecord, count)
	next := uint32(segmentHeaderSize)
	for i := range recs {
		e := b[i*footerEntrySize:]
		r := scannedRecord{
			hash: binary.LittleEndian.Uint64(e),
			loc: diskLoc{
				seg:   id,
				off:   binary.LittleEndian.Uint32(e[8:]),
				size:  binary.LittleEndian.Uint32(e[12:]),
				class: Class(e[16]),
			},
		}
		if r.loc.off != next || r.loc.size < recordHeaderSize+1 || r.loc.size > recordsEnd-r.loc.off ||
			(r.loc.class != ClassData && r.loc.class != ClassMeta) {
			return nil, fmt.Errorf("footer entry %d (offset %d, size %d, class %d): %w", i, r.loc.off, r.loc.size, e[16], ErrCorrupt)
		}
		next += r.loc.size
		recs[i] = r
	}
	if next != recordsEnd {
		return nil, fmt.Errorf("footer entries end at %d, records at %d: %w", next, recordsEnd, ErrCorrupt)
	}
	return recs, nil
}
