package sst

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shaledb/shale/cache/cachetest"
)

// readAll opens a table and reads everything in it: a full scan, a Get of
// every key given and a few seeks. It returns the first error.
func readAll(data []byte, keys [][]byte) (err error) {
	ctx := context.Background()
	tb, err := Open(ctx, BytesReadable(data), "t", cachetest.NewMap())
	if err != nil {
		return err
	}
	it := tb.NewIter(ctx, nil, nil)
	for ok := it.First(); ok; ok = it.Next() {
		_ = it.Entry()
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := tb.Get(ctx, k, nil); err != nil {
			return err
		}
		it := tb.NewIter(ctx, k, nil)
		it.SeekGE(k)
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// regionOf names the part of a table that holds offset off.
func regionOf(info Info, off int64) string {
	switch {
	case off < info.DataSize:
		return "data"
	case off < info.DataSize+info.FilterSize:
		return "filter"
	case off < info.Size-footerLen:
		return "index"
	default:
		return "footer"
	}
}

// TestCorruptionDetected changes every byte of small tables, one at a time,
// and checks that reading the whole table reports ErrCorrupt, and that every
// truncation does too.
func TestCorruptionDetected(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionS2, CompressionZstd} {
		t.Run("compression="+c.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(c)))
			entries := genEntries(rng, genSpec{keys: 60, maxVersions: 3, maxValue: 30})
			data, info := buildTable(t, entries, WriterOptions{BlockSize: 512, BloomBitsPerKey: 10, Compression: c})
			if info.NumDataBlocks < 3 {
				t.Fatalf("only %d blocks", info.NumDataBlocks)
			}
			// A full scan reads every data block; Gets and seeks of a few
			// keys cover the point-lookup paths.
			var keys [][]byte
			for i := 0; i < len(entries); i += 11 {
				keys = append(keys, entries[i].Key)
			}
			if err := readAll(data, keys); err != nil {
				t.Fatalf("intact table: %v", err)
			}
			seen := map[string]int{}
			bad := bytes.Clone(data)
			for off := range data {
				for _, flip := range []byte{0x01, 0xff} {
					bad[off] = data[off] ^ flip
					err := readAll(bad, keys)
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("byte %d (%s) ^ %#x: got %v, want ErrCorrupt", off, regionOf(info, int64(off)), flip, err)
					}
				}
				bad[off] = data[off]
				seen[regionOf(info, int64(off))]++
			}
			for _, r := range []string{"data", "filter", "index", "footer"} {
				if seen[r] == 0 {
					t.Fatalf("no byte of region %s was changed", r)
				}
			}
			for n := range len(data) {
				if err := readAll(data[:n], keys); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("truncated to %d bytes: got %v, want ErrCorrupt", n, err)
				}
			}
			// Extra bytes at the end move the footer too.
			if err := readAll(append(bytes.Clone(data), 0), keys); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("one byte appended: got %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestCorruptBlockBodies feeds block decoders malformed content that carries
// a valid checksum, as a buggy writer would produce.
func TestCorruptBlockBodies(t *testing.T) {
	valid := func() []byte {
		var b blockBuilder
		b.restartInterval = 2
		for i := range 5 {
			b.add(&Entry{Key: fmt.Appendf(nil, "key%d", i), Seq: 9, Kind: KindPut, Value: []byte("v")})
		}
		return bytes.Clone(b.finish())
	}()
	tests := []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"no-restarts", []byte{0, 0, 0, 0}},
		{"restart-count-huge", []byte{0xff, 0xff, 0xff, 0x7f}},
		{"first-restart-nonzero", []byte{1, 0, 0, 0, 1, 0, 0, 0}},
		{"truncated-entries", append(append([]byte{}, valid[:3]...), valid[len(valid)-12:]...)},
		{"bad-kind", func() []byte { b := bytes.Clone(valid); b[3] = 0x07; return b }()},
		{"shared-too-long", func() []byte { b := bytes.Clone(valid); b[0] = 9; return b }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var bi blockIter
			err := bi.init(tc.content)
			if err == nil {
				for ok := bi.first(); ok; ok = bi.next() {
				}
				err = bi.err
				if err == nil {
					bi.seekGE([]byte("key3"))
					err = bi.err
				}
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestOldFormatRefused: a version 1 table (whose entries could carry an
// expire_at) is refused, footer checksum and all else intact, and so is an
// entry whose meta byte sets a bit beyond the kind (version 1's expire flag
// was bit 7).
func TestOldFormatRefused(t *testing.T) {
	data, _ := buildTable(t, []Entry{{Key: []byte("k"), Seq: 1, Kind: KindPut, Value: []byte("v")}},
		WriterOptions{BlockSize: 4096, Compression: CompressionNone})
	v1 := bytes.Clone(data)
	foot := v1[len(v1)-footerLen:]
	binary.LittleEndian.PutUint32(foot[60:], 1)
	binary.LittleEndian.PutUint32(foot[56:], footerCRC(foot))
	if _, err := Open(context.Background(), BytesReadable(v1), "t", nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a version 1 table: err %v, want ErrCorrupt", err)
	}

	var bb blockBuilder
	bb.restartInterval = 16
	bb.add(&Entry{Key: []byte("k"), Seq: 1, Kind: KindPut, Value: []byte("v")})
	content := bytes.Clone(bb.finish())
	const metaOff = 3 // after shared, unshared and value length, one byte each
	for bit := 2; bit < 8; bit++ {
		bad := bytes.Clone(content)
		bad[metaOff] |= 1 << bit
		var bi blockIter
		if err := bi.init(bad); err != nil {
			t.Fatal(err)
		}
		if bi.first() || !errors.Is(bi.err, ErrCorrupt) {
			t.Fatalf("meta bit %d set: err %v, want ErrCorrupt", bit, bi.err)
		}
	}
}
