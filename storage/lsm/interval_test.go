package lsm

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// chunkInterval maps a value of "t<digit>" chunks of 10 bytes under a key
// starting with "s" to [10*min digit, 10*max digit + 9]: the union of its
// chunks', so that operands merged by concatenation map right too.
func chunkInterval(key, v []byte) (Interval, bool) {
	if len(key) == 0 || key[0] != 's' || len(v) == 0 || len(v)%10 != 0 {
		return Interval{}, false
	}
	iv := Interval{Lo: 1 << 62, Hi: -1}
	for ; len(v) > 0; v = v[10:] {
		if v[0] != 't' || v[1] < '0' || v[1] > '9' {
			return Interval{}, false
		}
		d := int64(v[1]-'0') * 10
		iv.Lo, iv.Hi = min(iv.Lo, d), max(iv.Hi, d+9)
	}
	return iv, true
}

// bytesBucket counts the bytes of ranged reads.
type bytesBucket struct {
	objstore.Bucket
	n atomic.Int64
}

func (b *bytesBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if strings.Contains(name, "/sst/") {
		b.n.Add(length)
	}
	return b.Bucket.GetRange(ctx, name, off, length)
}

// TestIteratorInterval: an iterator given an interval skips the table
// blocks whose merge operands all lie outside it and gives what a value
// filter alone gives, reading a fraction of the bytes, over L0 tables (one
// per round of operands) and after a compaction, on the writer and a reader;
// a key with a Put among its operands is read whole.
func TestIteratorInterval(t *testing.T) {
	ctx := context.Background()
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compact), func(t *testing.T) {
			comp := Components{Merge: concatMerge, OperandInterval: chunkInterval}
			b := &bytesBucket{Bucket: objstore.NewMemoryBucket()}
			db := openDB(t, b, testOptions(), comp)
			defer db.Close()
			key := func(i int) []byte { return fmt.Appendf(nil, "s%04d", i) }
			for round := range 4 {
				batch := NewBatch(600, 600*20)
				for i := range 600 {
					if round == 0 && i%100 == 7 {
						batch.Put(key(i), []byte("p"))
						continue
					}
					batch.Merge(key(i), fmt.Appendf(nil, "t%d%08d", round, i))
				}
				if err := db.Write(ctx, batch, db.DefaultWriteOptions()); err != nil {
					t.Fatal(err)
				}
				if err := db.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if compact {
				if err := db.Compact(ctx); err != nil {
					t.Fatal(err)
				}
			}
			rdr, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond}, comp)
			if err != nil {
				t.Fatal(err)
			}
			defer rdr.Close()
			want := Interval{Lo: 30, Hi: 39}
			keep := func(k, v []byte) bool {
				iv, ok := chunkInterval(k, v)
				return !ok || iv.Overlaps(want)
			}
			scan := func(v View, interval bool) ([]string, int64) {
				t.Helper()
				before := b.n.Load()
				it, err := v.NewIterator(ctx, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				it.SetValueFilter(keep)
				if interval {
					it.SetInterval(want)
				}
				var got []string
				for ok := it.First(); ok; ok = it.Next() {
					got = append(got, string(it.Key())+"="+string(it.Value()))
				}
				if err := it.Close(); err != nil {
					t.Fatal(err)
				}
				return got, b.n.Load() - before
			}
			for name, v := range map[string]View{"writer": db, "reader": rdr} {
				ref, all := scan(v, false)
				got, read := scan(v, true)
				if len(ref) != 600 || fmt.Sprint(got) != fmt.Sprint(ref) {
					t.Errorf("%s: scan with interval (%d keys) differs from the value filter's (%d keys)", name, len(got), len(ref))
				}
				// s0007 holds a Put "p" under operands of rounds 1-3 (merged
				// into one Put by a compaction, which chunkInterval does not
				// map).
				if !compact && len(got) > 7 && got[7] != "s0007=pt300000007" {
					t.Errorf("%s: %s, want s0007=pt300000007", name, got[7])
				}
				if compact {
					// One merged operand a key spans every round.
					if read < all/2 {
						t.Errorf("%s: compacted, read %d bytes with the interval, %d without", name, read, all)
					}
				} else if read*3 > all {
					t.Errorf("%s: read %d bytes with the interval, %d without", name, read, all)
				}
			}
		})
	}
}
