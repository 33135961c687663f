package lsm

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

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
// many tables hold it, then nothing the second time.
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
	scan := func(db *DB, readAhead bool, lo, hi []byte) (keys, vals [][]byte) {
		t.Helper()
		it, err := db.NewIterator(ctx, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		if readAhead {
			it.SetReadAhead()
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
	db.s.openAll(ctx, all)
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
}
