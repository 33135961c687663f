// Package sst is the sorted string table format of Shale's LSM: an immutable,
// sorted run of versioned key-value entries written once to object storage
// and read back with ranged reads.
//
// A table is a sequence of data blocks (prefix-compressed keys with restart
// points, optionally compressed, each with a CRC32C), a bloom filter block, an
// index block (one separator key and block handle per data block) and a
// fixed-size versioned footer. docs/format/sst.md describes the bytes.
//
// Format code reads through the Readable interface and a cache.Cache, never
// from a bucket or a file: the LSM owns object names and opens tables by
// wrapping a ranged object read in a Readable.
package sst

import (
	"context"
	"fmt"

	"github.com/shaledb/shale/corrupt"
)

// Kind is what an entry does to its key.
type Kind uint8

const (
	// KindPut sets the key to Value.
	KindPut Kind = 1
	// KindDelete is a tombstone; Value is empty.
	KindDelete Kind = 2
	// KindMerge is a merge operand, combined with older entries of the key by
	// the LSM's merge operator.
	KindMerge Kind = 3
)

var kindNames = [...]string{KindPut: "put", KindDelete: "delete", KindMerge: "merge"}

func (k Kind) String() string { return enumName(kindNames[:], uint8(k), "kind") }

func (k Kind) valid() bool { return k >= KindPut && k <= KindMerge }

// Entry is one versioned key-value record. Within a table entries are sorted
// by Key ascending (bytes.Compare), then Seq descending (newest first). One key
// may have several entries (e.g. a put and merge operands not yet combined).
type Entry struct {
	Key []byte
	// Seq is the sequence number assigned by the LSM writer; larger is newer.
	Seq   uint64
	Kind  Kind
	Value []byte
}

// Compression selects how data and index blocks are compressed. Each block
// records its own codec, so a reader handles tables written with any setting.
type Compression uint8

const (
	// CompressionNone stores blocks as they are.
	CompressionNone Compression = 0
	// CompressionS2 is klauspost/compress's S2 block format (a faster,
	// denser extension of Snappy).
	CompressionS2 Compression = 1
	// CompressionZstd is Zstandard at its fastest level (about zstd -1).
	CompressionZstd Compression = 2
)

var compressionNames = [...]string{CompressionNone: "none", CompressionS2: "s2", CompressionZstd: "zstd"}

func (c Compression) String() string { return enumName(compressionNames[:], uint8(c), "compression") }

func (c Compression) valid() bool { return c <= CompressionZstd }

// enumName is names[v], or what(v) for a value without a name.
func enumName(names []string, v uint8, what string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", what, v)
}

// ErrCorrupt marks corruption (bad checksum, bad magic, truncated or malformed
// bytes): errors.Is(err, sst.ErrCorrupt). It wraps corrupt.Err.
var ErrCorrupt = corrupt.New("sst: corrupt")

// corruptf returns an error that wraps ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Info describes a finished table; the LSM stores it in its manifest.
type Info struct {
	// Size is the table's length in bytes.
	Size int64
	// NumEntries counts entries (not distinct keys).
	NumEntries uint64
	// SmallestKey and LargestKey are the first and last keys of the table;
	// both are empty for an empty table.
	SmallestKey []byte
	LargestKey  []byte
	// MinSeq and MaxSeq bound the entries' sequence numbers; both are 0 for
	// an empty table.
	MinSeq, MaxSeq uint64
	// NumDataBlocks counts data blocks.
	NumDataBlocks int
	// DataSize is the bytes taken by data blocks (on disk, with trailers);
	// data blocks occupy [0, DataSize) of the table.
	DataSize int64
	// IndexSize and FilterSize are the on-disk sizes of the index and bloom
	// filter blocks (FilterSize is 0 when the table has no filter).
	IndexSize, FilterSize int64
}

// MetaSize is the size of the table's meta region (filter, index and
// footer), the tail that OpenHint reads in one round trip.
func (i Info) MetaSize() int64 { return i.Size - i.DataSize }

// Readable is the table's bytes, wherever they live (object store range
// reads). Implementations must be safe for concurrent use.
type Readable interface {
	// ReadAt returns exactly length bytes starting at off, or an error. The
	// returned slice is the caller's: the implementation never touches it
	// again.
	ReadAt(ctx context.Context, off, length int64) ([]byte, error)
	// Size returns the table's length in bytes.
	Size() int64
}

// BytesReadable is a Readable over a table held in memory.
type BytesReadable []byte

// ReadAt returns a copy of b[off:off+length].
func (b BytesReadable) ReadAt(_ context.Context, off, length int64) ([]byte, error) {
	if off < 0 || length < 0 || off > int64(len(b)) || length > int64(len(b))-off {
		return nil, fmt.Errorf("sst: read [%d,+%d) past size %d", off, length, len(b))
	}
	out := make([]byte, length)
	copy(out, b[off:off+length])
	return out, nil
}

// Size returns len(b).
func (b BytesReadable) Size() int64 { return int64(len(b)) }
