package objstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// contentETag is the ETag the filesystem and in-memory backends give an
// object: the xxHash64 of its content and its length, 32 hex digits in
// quotes, the shape of S3's ETag for a single-part upload. S3 hashes with
// MD5, which costs 24 times the CPU here (730 MB/s against 17 GB/s) and
// was 2.3 % of the server's CPU in a 100k-series ingest profile, where
// every byte is hashed as a WAL object, again in an L0 table and again in
// each compaction's output. ETags are opaque: only compared for equality.
func contentETag(data []byte) string { return formatETag(xxhash.Sum64(data), int64(len(data))) }

// formatETag is contentETag of content with xxHash64 sum and length size.
func formatETag(sum uint64, size int64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], sum)
	binary.BigEndian.PutUint64(b[8:], uint64(size))
	return `"` + hex.EncodeToString(b[:]) + `"`
}

// validateName rejects names no backend can store consistently.
func validateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty object name")
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("object name %q starts with '/'", name)
	case strings.HasSuffix(name, "/"):
		return fmt.Errorf("object name %q ends with '/'", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("object name %q has an empty, '.' or '..' path element", name)
		}
	}
	return nil
}

// clampRange resolves a ranged read against an object of the given size.
func clampRange(name string, size, off, length int64) (int64, int64, error) {
	if off < 0 {
		return 0, 0, fmt.Errorf("get %s: negative offset %d: %w", name, off, ErrInvalidRange)
	}
	if off >= size {
		if size == 0 && off == 0 {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("get %s: offset %d past size %d: %w", name, off, size, ErrInvalidRange)
	}
	end := size
	if length >= 0 && length < size-off { // not off+length: it may overflow
		end = off + length
	}
	return off, end, nil
}
