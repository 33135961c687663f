package objstore

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// contentETag is the ETag of an object written in one piece, as S3 computes it.
func contentETag(data []byte) string {
	sum := md5.Sum(data)
	return `"` + hex.EncodeToString(sum[:]) + `"`
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
