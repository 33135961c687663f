package sst

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/shaledb/shale/cache/cachetest"
	"github.com/shaledb/shale/internal/fuzzseed"
)

// Seed corpora live in testdata/fuzz/<target>. To regenerate them:
//
//	SST_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./storage/lsm/sst/
//
// Then fuzz with, for example:
//
//	go test -run '^$' -fuzz FuzzOpen -fuzztime 60s ./storage/lsm/sst/

// FuzzOpen opens arbitrary bytes as a table and reads all of it. Every error
// must be ErrCorrupt (the bytes are all there, so nothing else can fail) and
// nothing may panic.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeedTables(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		for _, c := range []*cachetest.Map{nil, cachetest.NewMap()} {
			var tb *Table
			var err error
			if c == nil {
				tb, err = Open(ctx, BytesReadable(data), "f", nil)
			} else {
				tb, err = Open(ctx, BytesReadable(data), "f", c)
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("open: %v is not ErrCorrupt", err)
				}
				return
			}
			info := tb.Info()
			var keys [][]byte
			it := tb.NewIter(ctx, nil, nil)
			for ok := it.First(); ok && len(keys) < 1000; ok = it.Next() {
				keys = append(keys, bytes.Clone(it.Entry().Key))
			}
			keys = append(keys, info.SmallestKey, info.LargestKey, nil, []byte("k"))
			checkFuzzErr(t, it.Close())
			for _, k := range keys {
				_, err := tb.Get(ctx, k, nil)
				checkFuzzErr(t, err)
				it := tb.NewIter(ctx, k, append(bytes.Clone(k), 0))
				for ok := it.First(); ok; ok = it.Next() {
				}
				it.SeekGE(k)
				checkFuzzErr(t, it.Close())
			}
			checkFuzzErr(t, tb.Prefetch(ctx, nil, nil))
		}
	})
}

func checkFuzzErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%v is not ErrCorrupt", err)
	}
}

// FuzzBlockDecoders feeds arbitrary bytes to the decoders that run after a
// checksum passed, so malformed content from a faulty writer cannot panic a
// reader either.
func FuzzBlockDecoders(f *testing.F) {
	for _, s := range fuzzSeedTables(f) {
		if len(s) < footerLen {
			continue
		}
		tb, err := Open(context.Background(), BytesReadable(s), "f", nil)
		if err != nil || len(tb.ix.handles) == 0 {
			continue
		}
		h := tb.ix.handles[0]
		content, err := decodeBlock(s[h.off:h.end()], false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(content, []byte("key"))
		f.Add(s[h.off:h.end()], tb.ix.smallest)
	}
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, content, key []byte) {
		var bi blockIter
		if err := bi.init(content); err == nil {
			n := 0
			for ok := bi.first(); ok && n < 10000; ok = bi.next() {
				n++
			}
			checkFuzzErr(t, bi.err)
			bi.err = nil
			bi.seekGE(key)
			checkFuzzErr(t, bi.err)
		} else {
			checkFuzzErr(t, err)
		}
		_, err := decodeIndex(content, int64(len(key))*100, formatVersion)
		checkFuzzErr(t, err)
		_, err = decodeFilter(content)
		checkFuzzErr(t, err)
		_, err = decodeBlock(content, false)
		checkFuzzErr(t, err)
		if len(content) >= footerLen {
			_, err = decodeFooter(content[:footerLen], int64(len(key))*100)
			checkFuzzErr(t, err)
		}
	})
}

// fuzzSeedTables returns small valid tables of each shape and codec, plus a
// few broken ones.
func fuzzSeedTables(tb testing.TB) [][]byte {
	tb.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	var out [][]byte
	for i, opts := range []WriterOptions{
		{BlockSize: 128, BloomBitsPerKey: 10, Compression: CompressionNone, RestartInterval: 2},
		{BlockSize: 256, BloomBitsPerKey: 10, Compression: CompressionS2},
		{BlockSize: 256, Compression: CompressionZstd},
	} {
		entries := genEntries(rng, genSpec{keys: 6 + 4*i, maxVersions: 3, maxValue: 40})
		data, _ := buildTable(tb, entries, opts)
		out = append(out, data)
	}
	empty, _ := buildTable(tb, nil, DefaultWriterOptions())
	out = append(out, empty, out[0][:len(out[0])/2], []byte(magic))
	return out
}

// fuzzSeedFiles returns the seed corpus files of testdata/fuzz, by path,
// as fuzzSeedTables makes them for the current format.
func fuzzSeedFiles(tb testing.TB) map[string][]byte {
	tb.Helper()
	files := map[string][]byte{}
	add := func(target, name string, args ...any) {
		files[fuzzseed.Path(target, name)] = fuzzseed.Encode(args...)
	}
	for i, data := range fuzzSeedTables(tb) {
		add("FuzzOpen", fmt.Sprintf("seed-%d", i), data)
		if len(data) > footerLen {
			add("FuzzBlockDecoders", fmt.Sprintf("seed-%d", i), data[:len(data)-footerLen], data[len(data)-footerLen:])
		}
	}
	return files
}

// TestWriteFuzzSeeds rewrites testdata/fuzz when SST_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SST_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set SST_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	for path, data := range fuzzSeedFiles(t) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFuzzSeedsCurrent fails when testdata/fuzz no longer holds the tables
// the writer makes, as after a format change: the seeds would be refused at
// open, every one, and the fuzzer would start from garbage.
func TestFuzzSeedsCurrent(t *testing.T) {
	if os.Getenv("SST_WRITE_FUZZ_SEEDS") != "" {
		t.Skip("TestWriteFuzzSeeds is rewriting them")
	}
	for path, want := range fuzzSeedFiles(t) {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: rewrite testdata/fuzz with SST_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds", path)
		}
	}
}
