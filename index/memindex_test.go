package index

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeBenchIndexes()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestMemIndexGetOrCreate(t *testing.T) {
	ix := NewMemIndex()
	a := labels.FromStrings("__name__", "up", "job", "node")
	b := labels.FromStrings("__name__", "up", "job", "prom")
	for i, tc := range []struct {
		lset    labels.Labels
		ref     uint32
		created bool
	}{
		{a, 0, true},
		{b, 1, true},
		{a, 0, false},
		{labels.FromStrings("__name__", "up", "job", "node", "empty", ""), 0, false}, // empty value = absent
		{labels.EmptyLabels(), 2, true},
		{labels.EmptyLabels(), 2, false},
		{labels.FromStrings("job", "node"), 3, true},
	} {
		ref, created := ix.GetOrCreate(tc.lset)
		if ref != tc.ref || created != tc.created {
			t.Fatalf("case %d %s: got ref %d created %v, want %d %v", i, tc.lset, ref, created, tc.ref, tc.created)
		}
	}
	if n := ix.NumSeries(); n != 4 {
		t.Fatalf("NumSeries = %d, want 4", n)
	}
	if got := ix.Labels(1); !labels.Equal(got, b) {
		t.Fatalf("Labels(1) = %s, want %s", got, b)
	}
	if got := ix.Labels(99); !got.IsEmpty() {
		t.Fatalf("Labels(99) = %s, want empty", got)
	}
	builder := labels.NewScratchBuilder(0)
	if _, err := ix.Series(context.Background(), 4, &builder); !errors.Is(err, ErrSeriesNotFound) {
		t.Fatalf("Series(4) error = %v, want ErrSeriesNotFound", err)
	}
	names, _ := ix.LabelNames(context.Background())
	if want := []string{"__name__", "job"}; !slices.Equal(names, want) {
		t.Fatalf("LabelNames = %v, want %v", names, want)
	}
}

func TestMemIndexHashCollisions(t *testing.T) {
	ix := NewMemIndex()
	ix.hash = func(lset labels.Labels) uint64 { return uint64(lset.Len() % 2) } // everything collides
	rng := rand.New(rand.NewPCG(7, 7))
	want := map[string]uint32{}
	var sets []labels.Labels
	for range 300 {
		lset := randomSeries(rng)
		sets = append(sets, lset)
		ref, created := ix.GetOrCreate(lset)
		if prev, seen := want[lset.String()]; seen {
			if created || ref != prev {
				t.Fatalf("%s: got ref %d created %v, want existing %d", lset, ref, created, prev)
			}
		} else {
			if !created || ref != uint32(len(want)) {
				t.Fatalf("%s: got ref %d created %v, want new %d", lset, ref, created, len(want))
			}
			want[lset.String()] = ref
		}
	}
	for _, lset := range sets {
		ref, created := ix.GetOrCreate(lset)
		if created || ref != want[lset.String()] || !labels.Equal(ix.Labels(ref), lset) {
			t.Fatalf("%s: ref %d created %v labels %s", lset, ref, created, ix.Labels(ref))
		}
	}
}

// TestMemIndexAdd checks an index filled by Add, which keeps no dictionary
// until GetOrCreate needs one, and Add after that.
func TestMemIndexAdd(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			ix := NewMemIndex()
			if collide {
				ix.hash = func(lset labels.Labels) uint64 { return uint64(lset.Len() % 2) }
			}
			rng := rand.New(rand.NewPCG(3, 3))
			seen := map[string]bool{}
			var sets []labels.Labels
			for len(sets) < 200 {
				lset := randomSeries(rng).WithoutEmpty()
				if !seen[lset.String()] {
					seen[lset.String()] = true
					sets = append(sets, lset)
				}
			}
			for i, lset := range sets[:100] {
				if ref := ix.Add(lset); ref != uint32(i) {
					t.Fatalf("Add(%s) = %d, want %d", lset, ref, i)
				}
			}
			// The first GetOrCreate finds what Add put in.
			for i, lset := range sets[:100] {
				if ref, created := ix.GetOrCreate(lset); created || ref != uint32(i) {
					t.Fatalf("GetOrCreate(%s) = %d, %v, want %d, false", lset, ref, created, i)
				}
			}
			// Add keeps the dictionary up to date once it exists.
			for i, lset := range sets[100:] {
				if ref := ix.Add(lset); ref != uint32(100+i) {
					t.Fatalf("Add(%s) = %d, want %d", lset, ref, 100+i)
				}
			}
			for i, lset := range sets {
				ref, created := ix.GetOrCreate(lset)
				if created || ref != uint32(i) || !labels.Equal(ix.Labels(ref), lset) {
					t.Fatalf("GetOrCreate(%s) = %d, %v with labels %s, want %d", lset, ref, created, ix.Labels(ref), i)
				}
			}
			if ref, created := ix.GetOrCreate(labels.FromStrings("__name__", "new")); !created || ref != 200 {
				t.Fatalf("new series: ref %d created %v, want 200 true", ref, created)
			}
		})
	}
}

// TestMemIndexEqual compares stored series with label sets that differ in
// a name, a value, a label more or a label less, one at a time and in a batch.
func TestMemIndexEqual(t *testing.T) {
	// Symbol ids take one, two or three varint bytes in the series' encoding
	// as more strings come before them.
	for _, fillers := range []int{0, 100, 20_000} {
		t.Run(fmt.Sprintf("fillers=%d", fillers), func(t *testing.T) { testMemIndexEqual(t, fillers) })
	}
}

func testMemIndexEqual(t *testing.T, fillers int) {
	ix := NewMemIndex()
	for i := range fillers {
		ix.GetOrCreate(labels.FromStrings("__name__", "filler", "i", strconv.Itoa(i)))
	}
	rng := rand.New(rand.NewPCG(4, 4))
	var sets []labels.Labels
	for len(sets) < 100 {
		lset := randomSeries(rng).WithoutEmpty()
		if _, created := ix.GetOrCreate(lset); created {
			sets = append(sets, lset)
		}
	}
	first := uint32(fillers) // the ref of sets[0]
	var refs []int64
	var others []labels.Labels
	for i, lset := range sets {
		if !ix.Equal(first+uint32(i), lset) {
			t.Fatalf("Equal(%d, %s) = false", i, lset)
		}
		b := labels.NewBuilder(lset)
		name := lset.Get("__name__")
		for _, other := range []labels.Labels{
			b.Set("__name__", name+"x").Labels(),
			labels.NewBuilder(lset).Set("zz_extra", "v").Labels(),
			labels.NewBuilder(lset).Del("__name__").Labels(),
			labels.FromStrings("__name__", name),
			labels.EmptyLabels(),
		} {
			if labels.Equal(other, lset) {
				continue
			}
			if ix.Equal(first+uint32(i), other) {
				t.Fatalf("Equal(%d, %s) = true for the series %s", i, other, lset)
			}
			refs = append(refs, int64(first)+int64(i))
			others = append(others, other)
		}
		refs = append(refs, int64(first)+int64(i))
		others = append(others, lset)
	}
	if ix.Equal(first+uint32(len(sets)), sets[0]) {
		t.Fatal("Equal is true for a ref past the last series")
	}
	refs = append(refs, int64(first)+int64(len(sets)), -1)
	others = append(others, sets[0], sets[0])
	orig := slices.Clone(refs)
	ix.EqualEach(refs, others)
	for i, ref := range refs {
		want := i < len(refs)-2 && labels.Equal(sets[orig[i]-int64(first)], others[i])
		if (ref >= 0) != want {
			t.Fatalf("EqualEach: entry %d (%s) left %d", i, others[i], ref)
		}
	}
}

// TestMemIndexConcurrent runs appenders and queries together; under -race
// it checks the locking, and afterwards that every label set got exactly
// one dense ref and the index agrees with a brute-force scan.
func TestMemIndexConcurrent(t *testing.T) {
	ix := NewMemIndex()
	ctx := context.Background()
	const writers, perWriter = 4, 300
	refs := make([]map[string]uint32, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, uint64(w%2))) // pairs of writers add the same series
			refs[w] = map[string]uint32{}
			for range perWriter {
				lset := randomSeries(rng)
				ref, _ := ix.GetOrCreate(lset)
				if prev, ok := refs[w][lset.String()]; ok && prev != ref {
					t.Errorf("%s got refs %d and %d", lset, prev, ref)
				}
				refs[w][lset.String()] = ref
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(2, uint64(r)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ms := []*labels.Matcher{randomMatcher(t, rng), randomMatcher(t, rng)}
				if _, err := Select(ctx, ix, ms...); err != nil {
					t.Error(err)
					return
				}
				if _, err := LabelValuesFor(ctx, ix, "job", ms...); err != nil {
					t.Error(err)
					return
				}
				_ = ix.ForEachPostings(0, func(string, string, *roaring.Bitmap) error { return nil })
				_ = ix.Stats(3)
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	seen := map[uint32]string{}
	for _, m := range refs {
		for s, ref := range m {
			if prev, ok := seen[ref]; ok && prev != s {
				t.Fatalf("ref %d given to %s and %s", ref, prev, s)
			}
			seen[ref] = s
		}
	}
	if len(seen) != ix.NumSeries() {
		t.Fatalf("%d distinct series, NumSeries %d", len(seen), ix.NumSeries())
	}
	for ref, s := range seen {
		if ix.Labels(ref).String() != s {
			t.Fatalf("ref %d: labels %s, want %s", ref, ix.Labels(ref), s)
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	series := allSeries(ix)
	for range 50 {
		ms := []*labels.Matcher{randomMatcher(t, rng), randomMatcher(t, rng)}
		got, err := Select(ctx, ix, ms...)
		if err != nil {
			t.Fatal(err)
		}
		if want := bruteForce(series, ms); !got.Equals(want) {
			t.Fatalf("%v: got %v want %v", ms, got.ToArray(), want.ToArray())
		}
	}
}

func TestMemIndexExport(t *testing.T) {
	ix := buildModelIndex(t, 11, 200)
	from := uint32(120)
	type pair struct{ name, value string }
	var order []pair
	got := map[pair][]uint32{}
	err := ix.ForEachPostings(from, func(name, value string, bm *roaring.Bitmap) error {
		order = append(order, pair{name, value})
		got[pair{name, value}] = bm.ToArray()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(order, func(a, b pair) int {
		if a.name != b.name {
			return compareStrings(a.name, b.name)
		}
		return compareStrings(a.value, b.value)
	}) {
		t.Fatalf("postings not in name, value order: %v", order)
	}
	want := map[pair][]uint32{}
	var nseries int
	err = ix.ForEachSeries(from, func(ref uint32, lset labels.Labels) error {
		if ref != from+uint32(nseries) {
			return fmt.Errorf("ref %d out of order", ref)
		}
		nseries++
		if !labels.Equal(lset, ix.Labels(ref)) {
			return fmt.Errorf("ref %d labels %s, want %s", ref, lset, ix.Labels(ref))
		}
		lset.Range(func(l labels.Label) { want[pair{l.Name, l.Value}] = append(want[pair{l.Name, l.Value}], ref) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if nseries != ix.NumSeries()-int(from) {
		t.Fatalf("ForEachSeries gave %d series, want %d", nseries, ix.NumSeries()-int(from))
	}
	if len(got) != len(want) {
		t.Fatalf("ForEachPostings gave %d pairs, want %d", len(got), len(want))
	}
	for p, refs := range want {
		if !slices.Equal(got[p], refs) {
			t.Fatalf("%s=%q: got %v want %v", p.name, p.value, got[p], refs)
		}
	}
	stop := errors.New("stop")
	if err := ix.ForEachPostings(0, func(string, string, *roaring.Bitmap) error { return stop }); err != stop {
		t.Fatalf("ForEachPostings error = %v, want the callback's", err)
	}
	if err := ix.ForEachSeries(0, func(uint32, labels.Labels) error { return stop }); err != stop {
		t.Fatalf("ForEachSeries error = %v, want the callback's", err)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestLabelValuesSortedIncrementally checks that LabelValues stays LabelValues sorted while values keep arriving.
func TestLabelValuesSortedIncrementally(t *testing.T) {
	ix := NewMemIndex()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 5))
	want := map[string]bool{}
	for i := range 500 {
		v := fmt.Sprintf("v%d", rng.IntN(400))
		ix.GetOrCreate(labels.FromStrings("a", v, "i", fmt.Sprint(i)))
		want[v] = true
		if i%37 == 0 {
			got, _ := ix.LabelValues(ctx, "a")
			if !slices.IsSorted(got) || len(got) != len(want) || len(slices.Compact(slices.Clone(got))) != len(got) {
				t.Fatalf("after %d series: values %v (want %d sorted distinct)", i, got, len(want))
			}
			for _, v := range got {
				if !want[v] {
					t.Fatalf("unexpected value %q", v)
				}
			}
		}
	}
	if got, _ := ix.LabelValues(ctx, "none"); len(got) != 0 {
		t.Fatalf("values of unknown label: %v", got)
	}
}

func TestLabelQueriesModel(t *testing.T) {
	ctx := context.Background()
	ix := buildModelIndex(t, 3, 800)
	readers := modelReaders(t, ix)
	series := allSeries(ix)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		ms := make([]*labels.Matcher, rng.IntN(3))
		for j := range ms {
			ms[j] = randomMatcher(t, rng)
		}
		name := modelNames[rng.IntN(len(modelNames))]
		sel := bruteForce(series, ms)
		if len(ms) == 0 {
			all, _ := ix.AllPostings(ctx)
			sel = all
		}
		wantNames, wantValues := map[string]bool{}, map[string]bool{}
		for _, ref := range sel.ToArray() {
			series[ref].Range(func(l labels.Label) {
				wantNames[l.Name] = true
				if l.Name == name {
					wantValues[l.Value] = true
				}
			})
		}
		for rname, r := range readers {
			gotNames, err := LabelNamesForMatchers(ctx, r, ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSet(gotNames, wantNames) || !slices.IsSorted(gotNames) {
				t.Fatalf("case %d reader=%s LabelNames %v: got %v want %v", i, rname, ms, gotNames, wantNames)
			}
			gotValues, err := LabelValuesFor(ctx, r, name, ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSet(gotValues, wantValues) || !slices.IsSorted(gotValues) {
				t.Fatalf("case %d reader=%s LabelValues(%s) %v: got %v want %v", i, rname, name, ms, gotValues, wantValues)
			}
		}
	}
}

func sameSet(got []string, want map[string]bool) bool {
	if len(got) != len(want) {
		return false
	}
	for _, s := range got {
		if !want[s] {
			return false
		}
	}
	return true
}

func TestStats(t *testing.T) {
	ix := NewMemIndex()
	for _, s := range []labels.Labels{
		labels.FromStrings("__name__", "up", "job", "node", "instance", "a"),
		labels.FromStrings("__name__", "up", "job", "node", "instance", "b"),
		labels.FromStrings("__name__", "up", "job", "prom", "instance", "c"),
		labels.FromStrings("__name__", "http", "job", "prom"),
	} {
		ix.GetOrCreate(s)
	}
	size := func(name string, vals map[string]uint64) uint64 {
		var n uint64
		for v, c := range vals {
			n += labels.SizeOfLabels(name, v, c)
		}
		return n
	}
	want := Stats{
		NumSeries:                  4,
		NumLabelPairs:              7,
		SeriesCountByMetricName:    []Stat{{"up", 3}, {"http", 1}},
		LabelValueCountByLabelName: []Stat{{"instance", 3}, {"__name__", 2}},
		MemoryInBytesByLabelName: []Stat{
			{"__name__", size("__name__", map[string]uint64{"up": 3, "http": 1})},
			{"job", size("job", map[string]uint64{"node": 2, "prom": 2})},
		},
		SeriesCountByLabelValuePair: []Stat{{"__name__=up", 3}, {"job=node", 2}},
	}
	got := ix.Stats(2)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("MemIndex.Stats:\n got %+v\nwant %+v", got, want)
	}
	for rname, r := range modelReaders(t, ix) {
		got, err := ComputeStats(context.Background(), r, 2)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ComputeStats(%s):\n got %+v\nwant %+v", rname, got, want)
		}
	}
	if got := ix.Stats(0); len(got.SeriesCountByLabelValuePair) != 0 || got.NumSeries != 4 {
		t.Fatalf("Stats(0) = %+v", got)
	}
}

// TestUnionStats: the statistics of several indexes holding overlapping
// series, each series counted once, are those of one index holding the
// union, whatever the overlap and the ranking's length.
func TestUnionStats(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 50 {
		nIdx := 1 + rng.IntN(4)
		ixs := make([]*MemIndex, nIdx)
		for i := range ixs {
			ixs[i] = NewMemIndex()
		}
		union := NewMemIndex()
		for range 1 + rng.IntN(300) {
			var b labels.ScratchBuilder
			b.Add("__name__", fmt.Sprintf("m%d", rng.IntN(5)))
			b.Add("instance", fmt.Sprintf("i%d", rng.IntN(40)))
			if rng.IntN(3) == 0 {
				b.Add("mode", fmt.Sprintf("x%d", rng.IntN(4)))
			}
			if rng.IntN(20) == 0 {
				b.Add(fmt.Sprintf("rare%d", rng.IntN(3)), "v") // names only some indexes hold
			}
			b.Sort()
			lset := b.Labels()
			union.GetOrCreate(lset)
			for i := range ixs { // in some indexes, at least one
				if i == 0 || rng.IntN(2) == 0 {
					ixs[(i+round)%nIdx].GetOrCreate(lset)
				}
			}
		}
		only := make([]*roaring.Bitmap, nIdx)
		for i := 1; i < nIdx; i++ {
			only[i] = roaring.New()
			for ref := range uint32(len(ixs[i].offsets)) {
				var b labels.ScratchBuilder
				lset, err := ixs[i].Series(context.Background(), ref, &b)
				if err != nil {
					t.Fatal(err)
				}
				earlier := false
				for _, e := range ixs[:i] {
					if _, ok := e.lookupLocked(e.hash(lset), lset); ok {
						earlier = true
					}
				}
				if !earlier {
					only[i].Add(ref)
				}
			}
		}
		for _, topN := range []int{0, 1, 3, 1000} {
			got, want := UnionStats(ixs, only, topN), union.Stats(topN)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, %d indexes, top %d:\n got %+v\nwant %+v", round, nIdx, topN, got, want)
			}
		}
	}
}

// TestValuesIntersecting checks the head index's in-place intersection of a
// label's postings with a selection against a brute-force one, for pairs of
// one series, of a few and of many (run containers), and selections of
// every shape.
func TestValuesIntersecting(t *testing.T) {
	ctx := context.Background()
	ix := NewMemIndex()
	sizes := map[string]int{"one": 1, "few": 64, "many": 320}
	refsOf := map[string][]uint32{}
	for v, n := range sizes {
		for i := range n {
			ref := ix.Add(labels.FromStrings("v", v, "i", strconv.Itoa(i)))
			refsOf[v] = append(refsOf[v], ref)
		}
	}
	values := []string{"few", "many", "missing", "one"}
	rng := rand.New(rand.NewPCG(5, 6))
	for c := range 300 {
		p := roaring.New()
		for range rng.IntN(4) {
			v := values[rng.IntN(3)]
			if v == "missing" {
				continue
			}
			refs := refsOf[v]
			p.Add(refs[rng.IntN(len(refs))])
		}
		if c%10 == 0 {
			p.AddRange(0, uint64(rng.IntN(600))) // runs
			p.RunOptimize()
		}
		var want []string
		for _, v := range values {
			for _, ref := range refsOf[v] {
				if p.Contains(ref) {
					want = append(want, v)
					break
				}
			}
		}
		got, err := ix.ValuesIntersecting(ctx, "v", values, p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("case %d, selection %v: got %v, want %v", c, p.ToArray(), got, want)
		}
	}
	if got, err := ix.ValuesIntersecting(ctx, "nolabel", values, roaring.BitmapOf(1)); err != nil || len(got) != 0 {
		t.Fatalf("unknown label: %v %v", got, err)
	}
}
