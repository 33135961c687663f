package lsm

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

func TestCheckFencedIdleWriter(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := DefaultOptions()
	opts.CompactionInterval, opts.GCInterval = 0, 0
	first := openDB(t, b, opts, Components{})
	if err := first.CheckFenced(ctx); err != nil {
		t.Fatalf("unfenced writer: %v", err)
	}
	second := openDB(t, b, opts, Components{})
	defer second.Close()
	if err := first.CheckFenced(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("after a newer writer opened: %v, want ErrFenced", err)
	}
	if err := first.Put(ctx, []byte("k"), []byte("v")); !errors.Is(err, ErrFenced) {
		t.Fatalf("write of a fenced writer: %v, want ErrFenced", err)
	}
	if err := second.CheckFenced(ctx); err != nil {
		t.Fatalf("newest writer: %v", err)
	}
	_ = first.Close()
}

// unconditional is a store that ignores create-if-absent: every put
// replaces, as older S3-compatible servers do with If-None-Match.
type unconditional struct{ objstore.Bucket }

func (b unconditional) Put(ctx context.Context, name string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.Attributes, error) {
	opts.IfAbsent = false
	return b.Bucket.Put(ctx, name, r, size, opts)
}

// A writer refuses to open on a store that ignores create-if-absent puts,
// on which its fencing and crash recovery rest, and says so; it leaves
// nothing behind.
func TestOpenRefusesStoreWithoutConditionalPuts(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMemoryBucket()
	_, err := Open(ctx, unconditional{mem}, "db", testOptions(), Components{Merge: concatMerge})
	if !errors.Is(err, ErrNoConditionalWrites) {
		t.Fatalf("open on a store without create-if-absent: %v, want ErrNoConditionalWrites", err)
	}
	if page, err := mem.List(ctx, "", "", 0); err != nil || len(page.Objects) != 0 {
		t.Fatalf("left %d objects (%v): %v", len(page.Objects), page.Objects, err)
	}
	db := openDB(t, mem, testOptions(), Components{})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A writer whose credentials may not delete (a policy without
// s3:DeleteObject, a bucket under object lock) still opens and writes: the
// create-if-absent probe it cannot delete is left behind with a warning,
// and only garbage collection waits for deletes to be allowed.
func TestOpenOnStoreThatRefusesDeletes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fb := objstore.NewFaultBucket(objstore.NewMemoryBucket())
	fb.Inject(objstore.Fault{Ops: []objstore.Op{objstore.OpDelete}, Err: errors.New("AccessDenied: Access Denied")})
	db, err := Open(ctx, fb, "db", testOptions(), Components{Merge: concatMerge})
	if err != nil {
		t.Fatalf("open on a store that refuses deletes: %v", err)
	}
	if err := db.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, db, "k"); !ok || v != "v" {
		t.Fatalf("k = %q, %v", v, ok)
	}
	// The flush leaves WAL objects to collect: the collection fails,
	// naming the refusal, rather than retrying until the writer stops.
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.collectGarbage(ctx, 0, 0); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("garbage collection on a store that refuses deletes: %v, want the refusal", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
