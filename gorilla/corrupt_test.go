package gorilla

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// decodeAll resets it to blk and walks it, returning the first error.
func decodeAll(it *Iterator, blk []byte) error {
	if err := it.Reset(blk); err != nil {
		return err
	}
	for it.Next() != chunkenc.ValNone {
	}
	return it.Err()
}

// TestCorruptFloatBlocks truncates every encoding of float block at every
// length and flips bits all over it: the decoder must report ErrCorrupt for
// every truncation and never panic.
func TestCorruptFloatBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var it Iterator
	for _, s := range genSeries(rng, 60) {
		blk := mustEncode(t, s.ts, s.vs)
		for n := range len(blk) {
			err := decodeAll(&it, blk[:n])
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s truncated to %d of %d bytes: err %v, want ErrCorrupt", s.name, n, len(blk), err)
			}
		}
		if err := decodeAll(&it, append(slices.Clone(blk), 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s with a trailing byte: err %v, want ErrCorrupt", s.name, err)
		}
		for range 200 {
			bad := slices.Clone(blk)
			bad[rng.IntN(len(bad))] ^= 1 << rng.IntN(8)
			if err := decodeAll(&it, bad); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: error %v does not wrap ErrCorrupt", s.name, err)
			}
		}
	}
}

// TestAppenderMemory checks the head's budget on the real data: about 1 KB
// per series, the appender holding ~compressed size, not raw samples.
func TestAppenderMemory(t *testing.T) {
	data := loadReal(t)
	total, samples := 0, 0
	for _, s := range data {
		var a Appender
		for i := range s.ts {
			if err := a.Append(s.ts[i], s.vs[i]); err != nil {
				t.Fatal(err)
			}
		}
		total += a.Size()
		samples += len(s.ts)
	}
	avg := total / len(data)
	t.Logf("%d series, %.0f samples each: %d bytes per appender, %.2f bytes/sample", len(data), float64(samples)/float64(len(data)), avg, float64(total)/float64(samples))
	if avg > 1024 {
		t.Errorf("appenders hold %d bytes per series, want at most 1024", avg)
	}

	// Four times as long (2 h 20 min at 5 s): each series repeated, shifted
	// in time; every eighth series keeps the test quick.
	total, samples = 0, 0
	n := 0
	for j, s := range data {
		if j%8 != 0 {
			continue
		}
		n++
		var a Appender
		shift := s.ts[len(s.ts)-1] - s.ts[0] + 5000
		for k := range int64(4) {
			for i := range s.ts {
				if err := a.Append(s.ts[i]+k*shift, s.vs[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		total += a.Size()
		samples += a.Count()
	}
	t.Logf("%d series, %.0f samples each: %d bytes per appender, %.2f bytes/sample", n, float64(samples)/float64(n), total/n, float64(total)/float64(samples))

	// Open streams of 24 samples, what the head holds between flushes at
	// 1M series: the stream's bits (timestamps and values) per sample.
	const window = 24
	streamBits, samples := 0, 0
	for _, s := range data {
		for off := 0; off+window <= len(s.ts); off += window {
			var a Appender
			for i := off; i < off+window; i++ {
				if err := a.Append(s.ts[i], s.vs[i]); err != nil {
					t.Fatal(err)
				}
			}
			w := a.stream()
			streamBits += w.bits()
			samples += window
		}
	}
	t.Logf("streams of %d samples: %.2f bytes/sample", window, float64(streamBits)/8/float64(samples))
}
