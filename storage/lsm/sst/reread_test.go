package sst

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/shaledb/shale/cache/cachetest"
)

// spoilingReadable flips one bit of the next spoil answers it gives, as a
// store or network that spoils answers on the way, and hears of the reads
// the table makes again (RereadObserver).
type spoilingReadable struct {
	data []byte

	mu      sync.Mutex
	spoil   int // answers still to spoil
	rereads int // Reread calls
}

func (r *spoilingReadable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	b, err := BytesReadable(r.data).ReadAt(ctx, off, length)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.spoil > 0 && len(b) > 0 {
		r.spoil--
		b[len(b)-1] ^= 0x10 // a checksum byte of a block, or the footer's magic
	}
	return b, err
}

func (r *spoilingReadable) Size() int64 { return int64(len(r.data)) }

func (r *spoilingReadable) Reread(err error) {
	if !errors.Is(err, ErrCorrupt) {
		panic("Reread told of " + err.Error())
	}
	r.mu.Lock()
	r.rereads++
	r.mu.Unlock()
}

// set makes the next n answers spoiled and zeroes the count of re-reads.
func (r *spoilingReadable) set(n int) {
	r.mu.Lock()
	r.spoil, r.rereads = n, 0
	r.mu.Unlock()
}

func (r *spoilingReadable) counts() (spoilLeft, rereads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spoil, r.rereads
}

// TestSpoiledAnswersAreReadAgain: bytes that fail their checksum are read
// again, up to CorruptRereads times, by every path that reads a table (open,
// point reads through the cache, iterators without it, prefetches); more
// spoiled answers than that report the corruption; and a spoiled block is
// never cached, so the next read after one gives the right bytes.
func TestSpoiledAnswersAreReadAgain(t *testing.T) {
	ctx := context.Background()
	for _, comp := range []Compression{CompressionNone, CompressionZstd} {
		t.Run(comp.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(comp)))
			entries := genEntries(rng, genSpec{keys: 400, prefixLen: 4, maxVersions: 2, maxValue: 300})
			data, _ := buildTable(t, entries, WriterOptions{BlockSize: 1024, Compression: comp, BloomBitsPerKey: 10})
			r := &spoilingReadable{data: data}

			// The failed open first: it must leave nothing spoiled in the
			// cache for the next.
			openCache := cachetest.NewMap()
			for _, spoiled := range []int{CorruptRereads + 1, CorruptRereads} {
				r.set(spoiled)
				_, err := Open(ctx, r, "tbl", openCache)
				if spoiled > CorruptRereads {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("open with %d spoiled answers: %v, want ErrCorrupt", spoiled, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("open with %d spoiled answers: %v", spoiled, err)
				}
				if _, n := r.counts(); n != spoiled {
					t.Errorf("open: %d re-reads, want %d", n, spoiled)
				}
			}

			// A fresh cache for the reads: the table's meta blocks come
			// from the clean open.
			r.set(0)
			c := cachetest.NewMap()
			tb, err := Open(ctx, r, "tbl", c)
			if err != nil {
				t.Fatal(err)
			}
			key := entries[len(entries)/2].Key
			want, err := Open(ctx, BytesReadable(data), "clean", nil)
			if err != nil {
				t.Fatal(err)
			}
			wantGot, err := want.Get(ctx, key, nil)
			if err != nil || len(wantGot) == 0 {
				t.Fatalf("clean get: %v, %d entries", err, len(wantGot))
			}

			// Too many spoiled answers: the read fails, and nothing spoiled
			// is cached.
			r.set(CorruptRereads + 1)
			if _, err := tb.Get(ctx, key, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("get with %d spoiled answers: %v, want ErrCorrupt", CorruptRereads+1, err)
			}
			r.set(CorruptRereads)
			got, err := tb.Get(ctx, key, nil)
			if err != nil {
				t.Fatalf("get with %d spoiled answers: %v", CorruptRereads, err)
			}
			checkEntries(t, "get", got, wantGot)
			if left, n := r.counts(); left != 0 || n != CorruptRereads {
				t.Errorf("get: %d spoiled answers unread, %d re-reads; want 0 and %d", left, n, CorruptRereads)
			}

			// A scan reads past the cache in runs of blocks.
			r.set(CorruptRereads)
			it := tb.NewScanIter(ctx, nil, nil)
			checkEntries(t, "scan", collect(t, it, it.First()), entries)
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			if _, n := r.counts(); n != CorruptRereads {
				t.Errorf("scan: %d re-reads, want %d", n, CorruptRereads)
			}
			r.set(CorruptRereads + 1)
			it = tb.NewScanIter(ctx, nil, nil)
			for ok := it.First(); ok; ok = it.Next() {
			}
			if err := it.Err(); !errors.Is(err, ErrCorrupt) {
				t.Errorf("scan with %d spoiled answers: %v, want ErrCorrupt", CorruptRereads+1, err)
			}
			_ = it.Close()

			// A prefetch caches whole runs.
			r.set(CorruptRereads)
			if err := tb.Prefetch(ctx, nil, nil); err != nil {
				t.Fatalf("prefetch with %d spoiled answers: %v", CorruptRereads, err)
			}
			r.set(0)
			it = tb.NewIter(ctx, nil, nil)
			checkEntries(t, "after prefetch", collect(t, it, it.First()), entries)
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
