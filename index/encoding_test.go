package index

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

func TestLabelsRoundTrip(t *testing.T) {
	builder := labels.NewScratchBuilder(0)
	for _, lset := range []labels.Labels{
		labels.EmptyLabels(),
		labels.FromStrings("a", ""),
		labels.FromStrings("__name__", "up", "instance", "host-1:9100", "job", "node"),
		labels.FromStrings("é", "ü\x00\xff", "z", strings.Repeat("v", 300)),
		labels.FromStrings(strings.Repeat("n", 200), "x"),
	} {
		prefix := []byte("prefix")
		enc := EncodeLabels(prefix, lset)
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatalf("%s: EncodeLabels did not append", lset)
		}
		got, err := DecodeLabels(enc[len(prefix):], &builder)
		if err != nil {
			t.Fatalf("%s: %v", lset, err)
		}
		if !labels.Equal(got, lset) {
			t.Fatalf("got %s want %s", got, lset)
		}
		// The result must not alias the input.
		clear(enc)
		if !labels.Equal(got, lset) {
			t.Fatalf("decoded labels changed with their input: %s", got)
		}
	}
}

func TestDecodeLabelsCorrupt(t *testing.T) {
	builder := labels.NewScratchBuilder(0)
	good := EncodeLabels(nil, labels.FromStrings("a", "1", "b", "2"))
	for name, b := range map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"huge count":     {0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad varint":     {0x80},
		"long string":    {1, 5, 'a', 1, 'b'},
		"unsorted":       {2, 1, 'b', 1, '1', 1, 'a', 1, '2'},
		"duplicate name": {2, 1, 'a', 1, '1', 1, 'a', 1, '2'},
		"empty name":     {1, 0, 1, 'x'},
	} {
		if _, err := DecodeLabels(b, &builder); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", name, err)
		}
	}
}

func testBitmaps() map[string]*roaring.Bitmap {
	rng := rand.New(rand.NewPCG(1, 2))
	sparse, dense, runs, mixed := roaring.New(), roaring.New(), roaring.New(), roaring.New()
	for range 5000 {
		sparse.Add(rng.Uint32())
	}
	for i := range uint32(200000) {
		if rng.IntN(3) > 0 {
			dense.Add(i)
		}
	}
	runs.AddRange(0, 1<<20)
	runs.AddRange(3<<20, 3<<20+17)
	for i := range uint32(3000) {
		mixed.Add(i * 7)
	}
	mixed.AddRange(1<<22, 1<<22+100000)
	return map[string]*roaring.Bitmap{
		"empty":  roaring.New(),
		"one":    roaring.BitmapOf(42),
		"max":    roaring.BitmapOf(0, math.MaxUint32),
		"few":    roaring.BitmapOf(1, 2, 3, 1000, 70000),
		"sparse": sparse,
		"dense":  dense,
		"runs":   runs,
		"mixed":  mixed,
	}
}

func TestPostingsRoundTrip(t *testing.T) {
	for name, bm := range testBitmaps() {
		before := bm.Clone()
		enc := EncodePostings([]byte{9}, bm)
		if enc[0] != 9 {
			t.Fatalf("%s: EncodePostings did not append", name)
		}
		if !bm.Equals(before) {
			t.Fatalf("%s: EncodePostings modified its input", name)
		}
		got, err := DecodePostings(enc[1:])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.Equals(bm) {
			t.Fatalf("%s: round trip changed the bitmap (%d vs %d refs)", name, got.GetCardinality(), bm.GetCardinality())
		}
		kind := enc[1]
		clear(enc)
		if !got.Equals(bm) {
			t.Fatalf("%s: decoded bitmap aliases its input", name)
		}
		// Never larger than roaring after run optimisation (plus the tag).
		opt := bm.Clone()
		opt.RunOptimize()
		if uint64(len(enc)-1) > opt.GetSerializedSizeInBytes()+1 {
			t.Fatalf("%s: %d bytes, roaring alone takes %d", name, len(enc)-1, opt.GetSerializedSizeInBytes())
		}
		if wantDelta := bm.GetCardinality() <= 16 || name == "sparse"; (kind == postingsDelta) != wantDelta {
			t.Fatalf("%s: encoded with kind %d", name, kind)
		}
		t.Logf("%s: %d refs in %d bytes", name, bm.GetCardinality(), len(enc)-1)
	}
}

func TestDecodePostingsCorrupt(t *testing.T) {
	roar := EncodePostings(nil, testBitmaps()["dense"])
	if roar[0] != postingsRoaring {
		t.Fatalf("dense bitmap not roaring-encoded")
	}
	for name, b := range map[string][]byte{
		"empty":            nil,
		"unknown tag":      {7, 0},
		"delta no count":   {postingsDelta},
		"delta short":      {postingsDelta, 3, 1, 1},
		"delta trailing":   {postingsDelta, 1, 1, 0},
		"delta overflow":   {postingsDelta, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
		"delta huge gap":   {postingsDelta, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"roaring empty":    {postingsRoaring},
		"roaring cookie":   {postingsRoaring, 1, 2, 3, 4},
		"roaring short":    roar[:len(roar)/2],
		"roaring trailing": append(append([]byte{}, roar...), 0),
	} {
		if _, err := DecodePostings(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: error %v, want ErrCorrupt", name, err)
		}
	}
}

func TestMergePostings(t *testing.T) {
	bms := testBitmaps()
	want := roaring.New()
	var ops [][]byte
	for _, name := range []string{"few", "sparse", "runs", "one"} {
		ops = append(ops, EncodePostings(nil, bms[name]))
		want.Or(bms[name])
	}
	existing := EncodePostings(nil, bms["mixed"])
	for _, tc := range []struct {
		name     string
		existing []byte
		ops      [][]byte
		want     *roaring.Bitmap
	}{
		{"no existing", nil, ops, want},
		{"existing", existing, ops, roaring.Or(want, bms["mixed"])},
		{"existing only", existing, nil, bms["mixed"]},
		{"nothing", nil, nil, roaring.New()},
	} {
		out, err := MergePostings([]byte("x"), tc.existing, tc.ops)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := DecodePostings(out[1:])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !got.Equals(tc.want) {
			t.Fatalf("%s: merged %d refs, want %d", tc.name, got.GetCardinality(), tc.want.GetCardinality())
		}
	}
	if _, err := MergePostings(nil, []byte{7}, ops); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt existing: %v", err)
	}
	if _, err := MergePostings(nil, nil, [][]byte{ops[0], {postingsDelta}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt operand: %v", err)
	}
}

func FuzzDecodeLabels(f *testing.F) {
	f.Add(EncodeLabels(nil, labels.FromStrings("__name__", "up", "job", "node")))
	f.Add([]byte{})
	builder := labels.NewScratchBuilder(0)
	f.Fuzz(func(t *testing.T, b []byte) {
		lset, err := DecodeLabels(b, &builder)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		// Varints need not be minimal, so compare decoded forms.
		again, err := DecodeLabels(EncodeLabels(nil, lset), &builder)
		if err != nil || !labels.Equal(again, lset) {
			t.Fatalf("re-encoding %s gives %s, %v", lset, again, err)
		}
	})
}

func FuzzDecodePostings(f *testing.F) {
	for _, bm := range testBitmaps() {
		if bm.GetCardinality() < 10000 {
			f.Add(EncodePostings(nil, bm))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bm, err := DecodePostings(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		card := bm.GetCardinality()
		n := uint64(0)
		bm.Iterate(func(uint32) bool { n++; return true })
		if n != card {
			t.Fatalf("cardinality %d, iterated %d", card, n)
		}
		again, err := DecodePostings(EncodePostings(nil, bm))
		if err != nil || !again.Equals(bm) {
			t.Fatalf("re-encoding fails: %v", err)
		}
	})
}

func FuzzMergePostings(f *testing.F) {
	f.Add(EncodePostings(nil, roaring.BitmapOf(1, 5)), EncodePostings(nil, roaring.BitmapOf(5, 1<<20)))
	f.Add([]byte{}, EncodePostings(nil, roaring.BitmapOf(7)))
	f.Fuzz(func(t *testing.T, existing, op []byte) {
		out, err := MergePostings(nil, existing, [][]byte{op})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not marked corrupt: %v", err)
			}
			return
		}
		got, err := DecodePostings(out)
		if err != nil {
			t.Fatalf("merge output does not decode: %v", err)
		}
		want, _ := DecodePostings(op)
		if len(existing) > 0 {
			e, _ := DecodePostings(existing)
			want.Or(e)
		}
		if !got.Equals(want) {
			t.Fatalf("merge gives %d refs, want %d", got.GetCardinality(), want.GetCardinality())
		}
	})
}
