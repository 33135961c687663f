package gorilla

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Part kinds of a multi-part block.
const (
	partFloat          byte = 1 // a float block
	partHistogram      byte = 2 // a chunkenc histogram chunk
	partFloatHistogram byte = 3 // a chunkenc float histogram chunk
)

type part struct {
	kind byte
	data []byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendParts appends a multi-part block:
//
//	header | nparts uvarint | crc32c of the rest, 4 bytes big endian |
//	nparts x (part kind byte | length uvarint | bytes)
//
// The checksum guards the histogram chunks, whose decoder does not expect
// arbitrary bytes.
func appendParts(dst []byte, kind Kind, count int, mint, maxt int64, parts []part) []byte {
	dst = appendHeader(dst, kind, count, mint, maxt)
	dst = binary.AppendUvarint(dst, uint64(len(parts)))
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, p := range parts {
		dst = append(dst, p.kind)
		dst = binary.AppendUvarint(dst, uint64(len(p.data)))
		dst = append(dst, p.data...)
	}
	binary.BigEndian.PutUint32(dst[at:], crc32.Checksum(dst[at+4:], castagnoli))
	return dst
}

// parseParts checks a multi-part block body b against its header and
// appends its parts, which alias b, to ps.
func parseParts(ps []part, h *header, b []byte) ([]part, error) {
	np, n := binary.Uvarint(b)
	if n <= 0 || np == 0 || np > uint64(h.count) {
		return ps, corruptf("bad part count")
	}
	b = b[n:]
	if len(b) < 4 {
		return ps, corruptf("truncated checksum")
	}
	if want, got := binary.BigEndian.Uint32(b), crc32.Checksum(b[4:], castagnoli); want != got {
		return ps, corruptf("checksum %08x, want %08x", got, want)
	}
	b = b[4:]
	total := 0
	for i := range int(np) {
		if len(b) == 0 {
			return ps, corruptf("truncated part %d", i)
		}
		k := b[0]
		l, n := binary.Uvarint(b[1:])
		if n <= 0 || l > uint64(len(b)-1-n) {
			return ps, corruptf("bad length of part %d", i)
		}
		data := b[1+n : 1+n+int(l)]
		b = b[1+n+int(l):]
		var cnt int
		switch k {
		case partFloat:
			var fh header
			if _, err := fh.parse(data); err != nil {
				return ps, err
			}
			cnt = fh.count
		case partHistogram, partFloatHistogram:
			if len(data) < 3 {
				return ps, corruptf("histogram part %d too short", i)
			}
			cnt = int(binary.BigEndian.Uint16(data))
		default:
			return ps, corruptf("unknown part kind %d", k)
		}
		if !partAllowed(h.kind, k) {
			return ps, corruptf("part kind %d in a %s block", k, h.kind)
		}
		if cnt == 0 {
			return ps, corruptf("empty part %d", i)
		}
		total += cnt
		ps = append(ps, part{kind: k, data: data})
	}
	if len(b) != 0 {
		return ps, corruptf("%d bytes after the last part", len(b))
	}
	if total != h.count {
		return ps, corruptf("parts hold %d samples, header says %d", total, h.count)
	}
	return ps, nil
}

func partAllowed(k Kind, p byte) bool {
	switch k {
	case KindHistogram:
		return p == partHistogram
	case KindFloatHistogram:
		return p == partFloatHistogram
	case KindMixed:
		return true
	}
	return false
}

func partKindOf(vt chunkenc.ValueType) byte {
	switch vt {
	case chunkenc.ValHistogram:
		return partHistogram
	case chunkenc.ValFloatHistogram:
		return partFloatHistogram
	}
	return partFloat
}
