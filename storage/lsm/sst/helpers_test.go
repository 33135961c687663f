package sst

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/shaledb/shale/cache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingReadable is a Readable over bytes that counts reads and bytes read.
type countingReadable struct {
	data  []byte
	mu    sync.Mutex
	reads int
	bytes int64
	err   error // returned by every read when set
}

func (r *countingReadable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	r.mu.Lock()
	r.reads++
	r.bytes += length
	err := r.err
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return BytesReadable(r.data).ReadAt(ctx, off, length)
}

func (r *countingReadable) Size() int64 { return int64(len(r.data)) }

func (r *countingReadable) stats() (reads int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads, r.bytes
}

func (r *countingReadable) reset() {
	r.mu.Lock()
	r.reads, r.bytes = 0, 0
	r.mu.Unlock()
}

// buildTable writes entries (already in table order) to a new table.
func buildTable(t testing.TB, entries []Entry, opts WriterOptions) ([]byte, Info) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range entries {
		if err := w.Add(e); err != nil {
			t.Fatalf("add %q/%d: %v", e.Key, e.Seq, err)
		}
	}
	info, err := w.Finish()
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if info.Size != int64(buf.Len()) {
		t.Fatalf("info size %d, wrote %d", info.Size, buf.Len())
	}
	return buf.Bytes(), info
}

func openTable(t testing.TB, data []byte, c cache.Cache) *Table {
	t.Helper()
	tb, err := Open(context.Background(), BytesReadable(data), "t", c)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return tb
}

// openCounted opens data as table "tbl" through a countingReadable, which
// it returns too.
func openCounted(t testing.TB, data []byte, c cache.Cache) (*Table, *countingReadable) {
	t.Helper()
	r := &countingReadable{data: data}
	tb, err := Open(context.Background(), r, "tbl", c)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return tb, r
}

// genSpec shapes random entries.
type genSpec struct {
	keys        int     // distinct keys
	prefixLen   int     // shared prefix of every key
	maxVersions int     // entries per key, 1..maxVersions
	maxValue    int     // value length 0..maxValue
	largeEvery  int     // every n-th entry gets a value of largeSize (0: never)
	largeSize   int     // size of large values
	emptyShare  float64 // share of entries with empty values
}

// genEntries returns random entries in table order.
func genEntries(rng *rand.Rand, s genSpec) []Entry {
	prefix := make([]byte, s.prefixLen)
	for i := range prefix {
		prefix[i] = byte('a' + rng.IntN(3))
	}
	seen := map[string]bool{}
	var keys [][]byte
	for len(keys) < s.keys {
		k := append([]byte(nil), prefix...)
		k = fmt.Appendf(k, "%x", rng.Uint64()>>uint(rng.IntN(60)))
		if rng.IntN(4) == 0 {
			k = append(k, byte(rng.IntN(256)), 0, 0xff)
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	var out []Entry
	n := 0
	for _, k := range keys {
		versions := 1 + rng.IntN(max(s.maxVersions, 1))
		seq := uint64(1 + rng.IntN(1_000_000) + versions)
		for range versions {
			e := Entry{Key: k, Seq: seq, Kind: Kind(1 + rng.IntN(3))}
			seq -= 1 + uint64(rng.IntN(2))
			switch {
			case s.largeEvery > 0 && n%s.largeEvery == s.largeEvery-1:
				e.Value = randBytes(rng, s.largeSize)
			case e.Kind == KindDelete || rng.Float64() < s.emptyShare:
			default:
				e.Value = randBytes(rng, rng.IntN(s.maxValue+1))
			}
			out = append(out, e)
			n++
		}
	}
	return out
}

// randBytes returns compressible-ish random bytes: runs of a small alphabet.
func randBytes(rng *rand.Rand, n int) []byte {
	if n == 0 {
		return nil
	}
	b := make([]byte, n)
	for i := range b {
		if rng.IntN(3) == 0 {
			b[i] = byte(rng.IntN(256))
		} else {
			b[i] = byte('0' + rng.IntN(10))
		}
	}
	return b
}

func entryEqual(a, b Entry) bool {
	return bytes.Equal(a.Key, b.Key) && a.Seq == b.Seq && a.Kind == b.Kind && bytes.Equal(a.Value, b.Value)
}

func fmtEntry(e Entry) string {
	return fmt.Sprintf("{%q seq=%d %v len=%d}", e.Key, e.Seq, e.Kind, len(e.Value))
}

func cloneEntry(e Entry) Entry {
	e.Key = bytes.Clone(e.Key)
	e.Value = bytes.Clone(e.Value)
	return e
}

// collect iterates it from the current position to the end.
func collect(t testing.TB, it *Iter, ok bool) []Entry {
	t.Helper()
	var out []Entry
	for ; ok; ok = it.Next() {
		out = append(out, cloneEntry(it.Entry()))
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	return out
}

func checkEntries(t testing.TB, what string, got, want []Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !entryEqual(got[i], want[i]) {
			t.Fatalf("%s: entry %d = %s, want %s", what, i, fmtEntry(got[i]), fmtEntry(want[i]))
		}
	}
}

// lowerBound is the index of the first entry with key >= k.
func lowerBound(entries []Entry, k []byte) int {
	i, _ := slices.BinarySearchFunc(entries, k, func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
	return i
}
