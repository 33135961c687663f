package lsm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

func TestBasicOperations(t *testing.T) {
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%v", wal), func(t *testing.T) {
			ctx := context.Background()
			b := objstore.NewMemoryBucket()
			clock := newFakeClock()
			opts := testOptions()
			opts.WALEnabled = wal
			db := openDB(t, b, opts, Components{Clock: clock})
			check := func(key, want string, wantOK bool) {
				t.Helper()
				got, ok := mustGet(t, db, key)
				if ok != wantOK || got != want {
					t.Fatalf("get %q = %q,%v; want %q,%v", key, got, ok, want, wantOK)
				}
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(db.Put(ctx, []byte("a"), []byte("1")))
			must(db.Put(ctx, []byte("b"), []byte("2")))
			must(db.Merge(ctx, []byte("b"), []byte("+x")))
			must(db.Merge(ctx, []byte("c"), []byte("m")))
			must(db.Put(ctx, []byte("d1"), []byte("x")))
			must(db.Put(ctx, []byte("d2"), []byte("x")))
			must(db.Delete(ctx, []byte("a")))
			check("a", "", false)
			check("b", "2+x", true)
			check("c", "m", true)
			must(db.Flush(ctx))
			must(db.DeleteRange(ctx, []byte("d"), []byte("e")))
			check("d1", "", false)
			check("b", "2+x", true)
			must(db.Merge(ctx, []byte("b"), []byte("+y")))
			must(db.Flush(ctx))
			check("b", "2+x+y", true)
			must(db.Compact(ctx))
			must(db.Close())

			db = openDB(t, b, opts, Components{Clock: clock})
			defer db.Close()
			check("a", "", false)
			check("b", "2+x+y", true)
			check("c", "m", true)
			check("d2", "", false)
			it, err := db.NewIterator(ctx, nil, nil)
			must(err)
			var got []string
			for ok := it.First(); ok; ok = it.Next() {
				got = append(got, string(it.Key())+"="+string(it.Value()))
			}
			must(it.Close())
			if fmt.Sprint(got) != "[b=2+x+y c=m]" {
				t.Fatalf("iteration = %v", got)
			}
		})
	}
}

func TestWALReplayAfterCrash(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	db := openDB(t, b, testOptions(), Components{})
	for i := 0; i < 100; i++ {
		if err := db.Put(ctx, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Writes await their WAL object; FlushWAL pushes it now.
	done := make(chan error, 1)
	go func() { done <- db.Merge(ctx, []byte("k000"), []byte("+m")) }()
	crash(db)
	<-done

	db = openDB(t, b, testOptions(), Components{})
	defer db.Close()
	for i := 1; i < 100; i++ {
		if v, ok := mustGet(t, db, fmt.Sprintf("k%03d", i)); !ok || v != "v" {
			t.Fatalf("k%03d = %q,%v after replay", i, v, ok)
		}
	}
}

func TestFencing(t *testing.T) {
	ctx := context.Background()
	for _, wal := range []bool{true, false} {
		t.Run(fmt.Sprintf("wal=%v", wal), func(t *testing.T) {
			b := objstore.NewMemoryBucket()
			opts := testOptions()
			opts.WALEnabled = wal
			old := openDB(t, b, opts, Components{})
			if err := old.Put(ctx, []byte("a"), []byte("old")); err != nil {
				t.Fatal(err)
			}
			if err := old.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := old.Put(ctx, []byte("b"), []byte("old")); err != nil {
				t.Fatal(err)
			}
			if !wal {
				if err := old.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cur := openDB(t, b, opts, Components{})
			defer cur.Close()
			if err := cur.Put(ctx, []byte("a"), []byte("new")); err != nil {
				t.Fatal(err)
			}
			// The old writer's next durable write fails: its WAL id or its
			// manifest version is taken.
			err := old.Put(ctx, []byte("a"), []byte("stale"))
			if err == nil {
				err = old.Flush(ctx)
			}
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("old writer after fencing: err = %v, want ErrFenced", err)
			}
			if err := old.Put(ctx, []byte("c"), []byte("x")); !errors.Is(err, ErrFenced) {
				t.Fatalf("second write: err = %v, want ErrFenced", err)
			}
			if err := old.Close(); err != nil {
				t.Fatalf("close fenced: %v", err)
			}
			if err := cur.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for key, want := range map[string]string{"a": "new", "b": "old"} {
				if v, ok := mustGet(t, cur, key); !ok || v != want {
					t.Fatalf("%s = %q,%v want %q", key, v, ok, want)
				}
			}
			if _, ok := mustGet(t, cur, "c"); ok {
				t.Fatal("fenced write visible to the new writer")
			}
		})
	}
}

func TestFlushWAL(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := testOptions()
	opts.WALFlushInterval = time.Hour // only FlushWAL writes WAL objects
	db := openDB(t, b, opts, Components{})
	for i := 0; i < 20; i++ {
		if err := db.Write(ctx, batchOf(fmt.Sprintf("k%02d", i), []byte("v")), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			if err := db.FlushWAL(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.FlushWAL(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushWAL(ctx); err != nil { // nothing pending
		t.Fatal(err)
	}
	crash(db)
	db = openDB(t, b, opts, Components{})
	defer db.Close()
	for i := 0; i < 20; i++ {
		if _, ok := mustGet(t, db, fmt.Sprintf("k%02d", i)); !ok {
			t.Fatalf("k%02d lost after FlushWAL and a crash", i)
		}
	}
}

// TestAgeFlush: with the WAL off, a write awaiting durability returns once
// its memtable is flushed for age (MemtableMaxAge by the DB's clock).
func TestAgeFlush(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	opts := testOptions()
	opts.WALEnabled = false
	opts.MemtableMaxAge = time.Millisecond
	db, _ := openMemDB(t, opts, Components{Clock: clock})
	clock.Advance(time.Second) // the memtable is old before its first write
	if err := db.Write(ctx, batchOf("k", []byte("v")), WriteOptions{AwaitDurable: true}); err != nil {
		t.Fatal(err)
	}
	if l0 := len(db.viewp.Load().man.L0); l0 != 1 {
		t.Fatalf("durable write acknowledged with %d L0 tables", l0)
	}
}

func TestPrefixes(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	for _, prefix := range []string{"", "tenant/a", "tenant/b/"} {
		db, err := Open(ctx, b, prefix, testOptions(), Components{})
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		if err := db.Put(ctx, []byte("k"), []byte(prefix)); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"manifest/": {"manifest/00000000000000000001.manifest", "manifest/00000000000000000002.manifest"},
		"tenant/a/": nil, "tenant/b/": nil,
	}
	for dir, names := range want {
		got := listNames(t, b, dir)
		if names != nil && fmt.Sprint(got) != fmt.Sprint(names) {
			t.Fatalf("objects under %q: %v", dir, got)
		}
		if len(got) == 0 {
			t.Fatalf("nothing written under %q", dir)
		}
	}
	for _, prefix := range []string{"", "tenant/a", "tenant/b"} {
		r, err := OpenReader(ctx, b, prefix, ReaderOptions{RetryBackoff: time.Millisecond}, Components{})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := mustGet(t, r, "k"); !ok || strings.TrimSuffix(v, "/") != prefix {
			t.Fatalf("prefix %q reads %q,%v", prefix, v, ok)
		}
		r.Close()
	}
}
