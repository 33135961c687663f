package sst

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Every block on disk is its payload followed by a 5-byte trailer: one byte
// naming the payload's compression, then the CRC32C (Castagnoli) of payload
// and that byte, little-endian. A compressed payload starts with the
// uvarint length of the uncompressed content.
const blockTrailerLen = 5

// maxExpansion bounds uncompressed/compressed size so that a corrupt length
// cannot make a reader allocate without limit; a writer stores a block that
// compresses better than this uncompressed.
const maxExpansion = 1024

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encoders and decoders are costly to create and safe for concurrent
// EncodeAll/DecodeAll, so the package shares one of each. Neither starts
// goroutines for EncodeAll/DecodeAll.
var (
	zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false), // the block trailer has a CRC
			zstd.WithZeroFrames(true),
			zstd.WithLowerEncoderMem(true),
		)
		if err != nil {
			panic(fmt.Sprintf("sst: zstd encoder: %v", err)) // options are constant
		}
		return enc
	})
	zstdDecoder = sync.OnceValue(func() *zstd.Decoder {
		dec, err := zstd.NewReader(nil,
			zstd.WithDecodeAllCapLimit(true),
			zstd.WithDecoderMaxMemory(maxBlockDecoded),
		)
		if err != nil {
			panic(fmt.Sprintf("sst: zstd decoder: %v", err)) // options are constant
		}
		return dec
	})
)

// maxBlockDecoded bounds the uncompressed size of one block.
const maxBlockDecoded = 1 << 30

// appendBlock appends content as one on-disk block (payload and trailer) to
// dst, compressed with c when that saves at least 1/8, and returns dst and
// whether it compressed.
func appendBlock(dst, content []byte, c Compression) ([]byte, bool) {
	start := len(dst)
	typ := CompressionNone
	if c != CompressionNone && len(content) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(content)))
		switch c {
		case CompressionS2:
			n := len(dst)
			dst = growCap(dst, s2.MaxEncodedLen(len(content)))
			enc := s2.Encode(dst[n:cap(dst)], content)
			dst = dst[:n+len(enc)]
		case CompressionZstd:
			dst = zstdEncoder().EncodeAll(content, dst)
		}
		if size := len(dst) - start; size < len(content)-len(content)/8 && len(content) <= maxExpansion*size {
			typ = c
		} else {
			dst = dst[:start]
		}
	}
	if typ == CompressionNone {
		dst = append(dst, content...)
	}
	dst = append(dst, byte(typ))
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), typ != CompressionNone
}

func growCap(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

// decodeBlock checks the trailer of an on-disk block and returns its
// content. An uncompressed block's content aliases raw unless clone is set,
// which a caller sets when raw is part of a larger read that a cached block
// must not pin; a compressed block's content is always new memory.
func decodeBlock(raw []byte, clone bool) ([]byte, error) {
	return decodeBlockReuse(raw, clone, nil)
}

// decodeBlockReuse is decodeBlock that decompresses a compressed block into
// reuse when it is large enough, for a caller done with reuse's previous
// content.
func decodeBlockReuse(raw []byte, clone bool, reuse []byte) ([]byte, error) {
	if err := checkBlock(raw); err != nil {
		return nil, err
	}
	return unwrapBlock(raw, clone, reuse)
}

// checkBlock checks the length and checksum of an on-disk block.
func checkBlock(raw []byte) error {
	if len(raw) < blockTrailerLen {
		return corruptf("block of %d bytes is shorter than its trailer", len(raw))
	}
	body := raw[:len(raw)-4]
	want := binary.LittleEndian.Uint32(raw[len(raw)-4:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return corruptf("block checksum mismatch: stored %08x, computed %08x", want, got)
	}
	return nil
}

// unwrapBlock is decodeBlockReuse of a block that checkBlock passed.
func unwrapBlock(raw []byte, clone bool, reuse []byte) ([]byte, error) {
	body := raw[:len(raw)-4]
	typ := Compression(body[len(body)-1])
	payload := body[:len(body)-1]
	if typ == CompressionNone {
		if clone {
			return cloneExact(payload), nil
		}
		return payload, nil
	}
	n, k := binary.Uvarint(payload)
	if k <= 0 {
		return nil, corruptf("bad uncompressed length of %s block", typ)
	}
	payload = payload[k:]
	if n > maxBlockDecoded || n > uint64(maxExpansion)*uint64(len(payload)) {
		return nil, corruptf("%s block claims %d bytes from %d", typ, n, len(payload))
	}
	switch typ {
	case CompressionS2:
		if dl, err := s2.DecodedLen(payload); err != nil || uint64(dl) != n {
			return nil, corruptf("s2 block length mismatch (%d, %v)", n, err)
		}
		out, err := s2.Decode(reuseOrMake(reuse, int(n)), payload)
		if err != nil {
			return nil, corruptf("s2 block: %v", err)
		}
		return out, nil
	case CompressionZstd:
		out, err := zstdDecoder().DecodeAll(payload, reuseOrMake(reuse, int(n))[:0])
		if err != nil {
			return nil, corruptf("zstd block: %v", err)
		}
		if uint64(len(out)) != n {
			return nil, corruptf("zstd block decoded to %d bytes, want %d", len(out), n)
		}
		return out, nil
	default:
		return nil, corruptf("unknown block compression %d", uint8(typ))
	}
}

// reuseOrMake returns b resliced to n bytes, or new memory when b is too
// small.
func reuseOrMake(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n)
}

// cloneExact copies b into memory of exactly its length (bytes.Clone rounds
// the capacity up), so what the cache accounts is what the block holds.
func cloneExact(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}
