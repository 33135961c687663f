package index

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// plainReader hides every optional interface of the Reader it wraps, so
// Select takes its fallback paths.
type plainReader struct{ r Reader }

func (p plainReader) LabelNames(ctx context.Context) ([]string, error) { return p.r.LabelNames(ctx) }
func (p plainReader) LabelValues(ctx context.Context, name string) ([]string, error) {
	return p.r.LabelValues(ctx, name)
}
func (p plainReader) Postings(ctx context.Context, name, value string) (*roaring.Bitmap, error) {
	return p.r.Postings(ctx, name, value)
}
func (p plainReader) AllPostings(ctx context.Context) (*roaring.Bitmap, error) {
	return p.r.AllPostings(ctx)
}

// encodedReader holds a partition only in its encoded forms, as the storage
// engine persists it, and decodes on every read. It is a SeriesReader with
// no other optional interface.
type encodedReader struct {
	names    []string
	values   map[string][]string
	postings map[string][]byte // name + "\xff" + value
	series   [][]byte
	all      []byte
}

func newEncodedReader(t testing.TB, ix *MemIndex) *encodedReader {
	t.Helper()
	er := &encodedReader{values: map[string][]string{}, postings: map[string][]byte{}}
	err := ix.ForEachPostings(0, func(name, value string, bm *roaring.Bitmap) error {
		if len(er.names) == 0 || er.names[len(er.names)-1] != name {
			er.names = append(er.names, name)
		}
		er.values[name] = append(er.values[name], value)
		er.postings[name+"\xff"+value] = EncodePostings(nil, bm)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = ix.ForEachSeries(0, func(ref uint32, lset labels.Labels) error {
		if int(ref) != len(er.series) {
			return fmt.Errorf("series %d out of order", ref)
		}
		er.series = append(er.series, EncodeLabels(nil, lset))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := ix.AllPostings(context.Background())
	er.all = EncodePostings(nil, all)
	return er
}

func (er *encodedReader) LabelNames(context.Context) ([]string, error) { return er.names, nil }
func (er *encodedReader) LabelValues(_ context.Context, name string) ([]string, error) {
	return er.values[name], nil
}
func (er *encodedReader) Postings(_ context.Context, name, value string) (*roaring.Bitmap, error) {
	b, ok := er.postings[name+"\xff"+value]
	if !ok {
		return roaring.New(), nil
	}
	return DecodePostings(b)
}
func (er *encodedReader) AllPostings(context.Context) (*roaring.Bitmap, error) {
	return DecodePostings(er.all)
}
func (er *encodedReader) Series(_ context.Context, ref uint32, b *labels.ScratchBuilder) (labels.Labels, error) {
	if int(ref) >= len(er.series) {
		return labels.EmptyLabels(), ErrSeriesNotFound
	}
	return DecodeLabels(er.series[ref], b)
}

var (
	modelNames  = []string{"__name__", "job", "instance", "path", "env", "le", "missing"}
	modelValues = []string{
		"foo", "bar", "baz", "foobar", "barfoo", "Foo", "FOO", "fooo", "f", "x", "xfoo",
		"/api/v1/query", "/api/v1/write", "/metrics", "/api", "a.b", "a|b", "é", "0", "1", "10",
		"+Inf", "node", "prometheus", "host-1:9100", "host-2:9100", "host-10:9100", "line\nbreak",
	}
	modelPatterns = []string{
		"", "foo", "bar", "nope", ".*", ".+", "foo.*", ".*foo", ".*foo.*", "foo|bar", "foo|bar|nope",
		"(?i)foo", "(?i)foo.*", "^foo$", "f.o", "|foo", "foo|", "a?", "(foo|bar)baz", "/api/.*",
		"/api/v1/(query|write)", "host-[0-9]+:9100", ".", "..?", "(?s).*", "x|", "[a-z]+",
		".*o", "fo+", "(|f)oo", ".*(foo|bar)", "line.*", ".*\n.*", "1|10|\\+Inf", "é",
	}
)

func randomSeries(rng *rand.Rand) labels.Labels {
	b := labels.NewScratchBuilder(len(modelNames))
	for _, name := range modelNames[:len(modelNames)-1] { // "missing" never appears
		if rng.IntN(3) > 0 {
			b.Add(name, modelValues[rng.IntN(len(modelValues))])
		}
	}
	b.Sort()
	return b.Labels()
}

func randomMatcher(t testing.TB, rng *rand.Rand) *labels.Matcher {
	t.Helper()
	name := modelNames[rng.IntN(len(modelNames))]
	typ := labels.MatchType(rng.IntN(4))
	var value string
	if typ == labels.MatchEqual || typ == labels.MatchNotEqual {
		if rng.IntN(4) == 0 {
			value = ""
		} else {
			value = modelValues[rng.IntN(len(modelValues))]
		}
	} else {
		value = modelPatterns[rng.IntN(len(modelPatterns))]
	}
	m, err := labels.NewMatcher(typ, name, value)
	if err != nil {
		t.Fatalf("matcher %s %q: %v", typ, value, err)
	}
	return m
}

func allSeries(ix *MemIndex) []labels.Labels {
	out := make([]labels.Labels, ix.NumSeries())
	for ref := range out {
		out[ref] = ix.Labels(uint32(ref))
	}
	return out
}

// bruteForce applies ms to every series in turn.
func bruteForce(series []labels.Labels, ms []*labels.Matcher) *roaring.Bitmap {
	out := roaring.New()
	if len(ms) == 0 {
		return out
	}
	for ref, lset := range series {
		if matchesAll(lset, ms) {
			out.Add(uint32(ref))
		}
	}
	return out
}

func buildModelIndex(t testing.TB, seed uint64, n int) *MemIndex {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	ix := NewMemIndex()
	for range n {
		ix.GetOrCreate(randomSeries(rng))
	}
	return ix
}

func modelReaders(t testing.TB, ix *MemIndex) map[string]Reader {
	t.Helper()
	return map[string]Reader{
		"mem":     ix,
		"plain":   plainReader{ix},
		"encoded": newEncodedReader(t, ix),
	}
}

func TestSelectModel(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{0, 1, 40, 1500} {
		ix := buildModelIndex(t, uint64(size), size)
		readers := modelReaders(t, ix)
		series := allSeries(ix)
		rng := rand.New(rand.NewPCG(uint64(size), 2))
		for i := range 400 {
			ms := make([]*labels.Matcher, rng.IntN(4)+1)
			if i == 0 {
				ms = nil
			}
			for j := range ms {
				ms[j] = randomMatcher(t, rng)
			}
			want := bruteForce(series, ms)
			for rname, r := range readers {
				got, err := Select(ctx, r, slices.Clone(ms)...)
				if err != nil {
					t.Fatalf("size=%d reader=%s %v: %v", size, rname, ms, err)
				}
				if !got.Equals(want) {
					t.Fatalf("size=%d reader=%s %v:\n got %v\nwant %v", size, rname, ms, got.ToArray(), want.ToArray())
				}
			}
		}
	}
}

func TestSelectCases(t *testing.T) {
	ctx := context.Background()
	ix := NewMemIndex()
	series := []labels.Labels{
		labels.FromStrings("__name__", "up", "job", "node", "instance", "a"),         // 0
		labels.FromStrings("__name__", "up", "job", "node", "instance", "b"),         // 1
		labels.FromStrings("__name__", "up", "job", "prom", "instance", "c"),         // 2
		labels.FromStrings("__name__", "http", "job", "prom", "path", "/api/v1/x"),   // 3
		labels.FromStrings("__name__", "http", "job", "prom", "path", "/metrics"),    // 4
		labels.FromStrings("__name__", "http", "path", "/api/v2/y", "instance", "A"), // 5
	}
	for i, s := range series {
		if ref, created := ix.GetOrCreate(s); ref != uint32(i) || !created {
			t.Fatalf("series %d got ref %d created %v", i, ref, created)
		}
	}
	f := func(want []uint32, ms ...*labels.Matcher) {
		t.Helper()
		for rname, r := range modelReaders(t, ix) {
			got, err := Select(ctx, r, ms...)
			if err != nil {
				t.Fatalf("%s %v: %v", rname, ms, err)
			}
			if !slices.Equal(got.ToArray(), want) && !(len(want) == 0 && got.IsEmpty()) {
				t.Fatalf("%s %v: got %v want %v", rname, ms, got.ToArray(), want)
			}
		}
	}
	eq := func(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchEqual, n, v) }
	neq := func(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotEqual, n, v) }
	re := func(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchRegexp, n, v) }
	nre := func(n, v string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotRegexp, n, v) }

	f(nil)
	f([]uint32{0, 1, 2}, eq("__name__", "up"))
	f([]uint32{0, 1}, eq("__name__", "up"), eq("job", "node"))
	f([]uint32{0, 2}, eq("__name__", "up"), re("instance", "a|c"))
	f([]uint32{3, 5}, re("path", "/api/.*"))
	f([]uint32{4}, re("path", ".*metrics"))
	f([]uint32{0, 1, 2}, eq("path", ""))
	f([]uint32{3, 4, 5}, neq("path", ""))
	f([]uint32{0, 1, 2, 3, 4, 5}, re("path", ".*"))
	f([]uint32{3, 4, 5}, re("path", ".+"))
	f([]uint32{0, 1, 2}, nre("path", ".+"))
	f(nil, nre("path", ".*"))
	f([]uint32{3, 4, 5}, nre("path", ""))
	f([]uint32{0, 1, 2, 4}, nre("path", "/api/.*"))
	f([]uint32{0, 1, 2, 3, 4}, neq("instance", "A"))
	f([]uint32{0, 1, 2, 3, 4, 5}, eq("nope", ""))
	f(nil, neq("nope", ""))
	f([]uint32{0, 5}, re("instance", "(?i)a"))
	f([]uint32{3, 4, 5}, re("instance", "|A"), eq("__name__", "http"))
	f([]uint32{5}, nre("job", "node|prom"), eq("nope", ""))
}

// failingReader fails its n-th call (counting from 0) with errInjected.
type failingReader struct {
	SeriesReader
	n, calls int
}

var errInjected = errors.New("injected")

func (f *failingReader) fail() error {
	f.calls++
	if f.calls-1 == f.n {
		return errInjected
	}
	return nil
}

func (f *failingReader) LabelNames(ctx context.Context) ([]string, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.SeriesReader.LabelNames(ctx)
}
func (f *failingReader) LabelValues(ctx context.Context, name string) ([]string, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.SeriesReader.LabelValues(ctx, name)
}
func (f *failingReader) Postings(ctx context.Context, name, value string) (*roaring.Bitmap, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.SeriesReader.Postings(ctx, name, value)
}
func (f *failingReader) AllPostings(ctx context.Context) (*roaring.Bitmap, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.SeriesReader.AllPostings(ctx)
}
func (f *failingReader) Series(ctx context.Context, ref uint32, b *labels.ScratchBuilder) (labels.Labels, error) {
	if err := f.fail(); err != nil {
		return labels.EmptyLabels(), err
	}
	return f.SeriesReader.Series(ctx, ref, b)
}

// TestReaderErrors fails each read of many queries in turn: every failure
// must come back as an error that wraps the reader's, never a wrong answer.
func TestReaderErrors(t *testing.T) {
	ctx := context.Background()
	ix := buildModelIndex(t, 9, 300)
	enc := newEncodedReader(t, ix)
	rng := rand.New(rand.NewPCG(9, 9))
	for n := 0; ; n++ {
		f := &failingReader{SeriesReader: newEncodedReader(t, buildModelIndex(t, 9, 30)), n: n}
		_, err := ComputeStats(ctx, f, 3)
		if err == nil {
			break
		}
		if !errors.Is(err, errInjected) {
			t.Fatalf("ComputeStats error %v does not wrap the reader's", err)
		}
	}
	for range 25 {
		ms := []*labels.Matcher{randomMatcher(t, rng), randomMatcher(t, rng)}
		name := modelNames[rng.IntN(len(modelNames))]
		for n := 0; ; n++ {
			f := &failingReader{SeriesReader: enc, n: n}
			_, err1 := Select(ctx, f, ms...)
			_, err2 := LabelValuesFor(ctx, f, name, ms...)
			_, err3 := LabelNamesForMatchers(ctx, f, ms...)
			failed := false
			for _, err := range []error{err1, err2, err3} {
				if err != nil && !errors.Is(err, errInjected) {
					t.Fatalf("%v: error %v does not wrap the reader's", ms, err)
				}
				failed = failed || err != nil
			}
			if !failed {
				break // n is past the last read
			}
		}
	}
}

func TestSelectCancelled(t *testing.T) {
	ix := buildModelIndex(t, 1, 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, r := range modelReaders(t, ix) {
		if _, err := Select(ctx, r, labels.MustNewMatcher(labels.MatchEqual, "job", "foo")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Select with a cancelled context: %v", err)
		}
	}
}
