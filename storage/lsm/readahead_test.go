package lsm

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/cache/cachetest"
	"github.com/shaledb/shale/storage/objstore"
)

// roundsBucket counts round trips: a read that starts while no other is in
// flight starts a new round.
type roundsBucket struct {
	objstore.Bucket
	mu               sync.Mutex
	inFlight, rounds int
	reads            int
}

func (r *roundsBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	r.mu.Lock()
	if r.inFlight == 0 {
		r.rounds++
	}
	r.inFlight++
	r.reads++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	return r.Bucket.GetRange(ctx, name, off, length)
}

func (r *roundsBucket) take() (rounds, reads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rounds, reads, r.rounds, r.reads = r.rounds, r.reads, 0, 0
	return rounds, reads
}

// TestIteratorReadAhead checks that an iterator with SetReadAhead returns
// what a plain one does, over the memtable, L0 tables and a sorted run of
// several tables, and that it reads a cold range in one round trip however
// many tables hold it, then nothing the second time. With SetNoFill too it
// returns the same without adding a data block to the cache, and reads
// nothing the cache already holds.
func TestIteratorReadAhead(t *testing.T) {
	ctx := context.Background()
	key := roundKey
	b, opts := closedRounds(t, func(round int, batch *Batch, val []byte) {
		for i := range 400 {
			if (i+round)%3 == 0 {
				continue // each table holds a part of the keys
			}
			batch.Put(key(i), val)
		}
		if round == 5 {
			batch.Delete(key(150))
		}
	})
	noFill := false
	scan := func(db *DB, readAhead bool, lo, hi []byte) (keys, vals [][]byte) {
		t.Helper()
		it, err := db.NewIterator(ctx, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		if readAhead {
			it.SetReadAhead()
		}
		if noFill {
			it.SetNoFill()
		}
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, bytes.Clone(it.Key()))
			vals = append(vals, bytes.Clone(it.Value()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return keys, vals
	}
	fb := objstore.NewFaultBucket(b)
	fb.SetLatency(5 * time.Millisecond)
	rb := &roundsBucket{Bucket: fb}
	db := openDB(t, rb, opts, Components{Cache: cachetest.NewMap()})
	defer db.Close()
	plain := openDB(t, b, opts, Components{})
	defer plain.Close()
	v, _ := db.snapshot()
	tables := len(v.man.L0)
	for _, r := range v.man.Runs {
		tables += len(r.Tables)
	}
	if len(v.man.L0) < 2 || len(v.man.Runs) == 0 || len(v.man.Runs[0].Tables) < 2 {
		t.Fatalf("want L0 tables and a run of several tables, have %d L0 and runs %v", len(v.man.L0), v.man.Runs)
	}
	// Open every table (read their meta) first: count the data reads only.
	var all []*tableMeta
	for i := range v.man.L0 {
		all = append(all, &v.man.L0[i])
	}
	for _, r := range v.man.Runs {
		for i := range r.Tables {
			all = append(all, &r.Tables[i])
		}
	}
	db.s.openAll(ctx, all, nil)
	rb.take()
	lo, hi := key(100), key(200)
	wantK, wantV := scan(plain, false, lo, hi)
	gotK, gotV := scan(db, true, lo, hi)
	rounds, reads := rb.take()
	t.Logf("%d tables: %d round trips, %d reads", tables, rounds, reads)
	if len(gotK) != len(wantK) || len(wantK) < 50 {
		t.Fatalf("read ahead: %d keys, plain: %d", len(gotK), len(wantK))
	}
	for i := range wantK {
		if !bytes.Equal(gotK[i], wantK[i]) || !bytes.Equal(gotV[i], wantV[i]) {
			t.Fatalf("entry %d: %q=%x, want %q=%x", i, gotK[i], gotV[i][:1], wantK[i], wantV[i][:1])
		}
	}
	if rounds != 1 {
		t.Fatalf("a cold read ahead over %d tables took %d round trips, want 1", tables, rounds)
	}
	scan(db, true, lo, hi)
	if rounds, reads := rb.take(); rounds != 0 {
		t.Fatalf("reading the range again: %d round trips, %d reads", rounds, reads)
	}

	// The whole key space, over every table of the run.
	noFill, lo, hi = true, key(0), key(400)
	wantK, wantV = scan(plain, false, lo, hi)
	c := cachetest.NewMap()
	cold := openDB(t, rb, opts, Components{Cache: c})
	defer cold.Close()
	cold.s.openAll(ctx, all, nil)
	rb.take()
	for pass := range 2 {
		gotK, gotV = scan(cold, true, lo, hi)
		if !slices.EqualFunc(gotK, wantK, bytes.Equal) || !slices.EqualFunc(gotV, wantV, bytes.Equal) {
			t.Fatalf("no fill, pass %d: %d keys, want the plain read's %d", pass, len(gotK), len(wantK))
		}
		if n := c.Count(cache.ClassData); n != 0 {
			t.Fatalf("no fill, pass %d: %d data blocks cached", pass, n)
		}
		if rounds, reads := rb.take(); rounds == 0 || reads < tables-1 {
			t.Fatalf("no fill, pass %d: %d round trips, %d reads over %d tables", pass, rounds, reads, tables)
		}
	}
	// Filled by a read that fills it, the cache serves a read that does not.
	noFill = false
	scan(cold, true, lo, hi)
	rb.take()
	noFill = true
	scan(cold, true, lo, hi)
	if rounds, reads := rb.take(); rounds != 0 {
		t.Fatalf("no fill over a cached range: %d round trips, %d reads", rounds, reads)
	}
}
