package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/shaledb/shale/gorilla"
)

func TestReadMergeFramesSampleBlocks(t *testing.T) {
	a, err := gorilla.Encode(nil, []int64{1000, 2000}, []float64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := gorilla.Encode(nil, []int64{2000, 3000}, []float64{20, 3})
	if err != nil {
		t.Fatal(err)
	}
	key := samplesKey(0, 7)
	v, err := readMergeValues(key, a, [][]byte{nil, b})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	if err := sampleBlocks(v, func(blk []byte) error { got = append(got, blk); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], a) || !bytes.Equal(got[1], b) {
		t.Fatalf("frames: %d blocks", len(got))
	}
	merged, err := mergedSampleValue(v)
	if err != nil {
		t.Fatal(err)
	}
	want, err := mergeValues(key, a, [][]byte{nil, b})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(merged, want) {
		t.Fatal("merging the frames differs from the compaction merge")
	}
	// One block stays a plain block; other keys merge as before.
	if v, err := readMergeValues(key, nil, [][]byte{a}); err != nil || !bytes.Equal(v, a) {
		t.Fatalf("single block: %v", err)
	}
	if v, err := readMergeValues(registryKey(0), []byte("x"), [][]byte{[]byte("y")}); err != nil || string(v) != "y" {
		t.Fatalf("registry key: %q, %v", v, err)
	}
	for _, bad := range [][]byte{{sampleFrames}, {sampleFrames, 2, 1, 0}, {sampleFrames, 1, 5, 0}, append(append([]byte{}, v...), 0)} {
		if err := sampleBlocks(bad, func([]byte) error { return nil }); !errors.Is(err, gorilla.ErrCorrupt) {
			t.Errorf("sampleBlocks(%x): %v, want corruption", bad, err)
		}
	}
}

// FuzzSampleBlocks: framed sample values read back from the object store
// never panic the splitter.
func FuzzSampleBlocks(f *testing.F) {
	a, _ := gorilla.Encode(nil, []int64{1, 2}, []float64{1, 2})
	v, _ := readMergeValues(samplesKey(0, 1), a, [][]byte{a})
	f.Add(v)
	f.Add(a)
	f.Add([]byte{sampleFrames, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		total := 0
		_ = sampleBlocks(b, func(blk []byte) error {
			total += len(blk)
			return nil
		})
		if total > len(b) {
			t.Fatalf("blocks of %d bytes out of %d", total, len(b))
		}
	})
}
