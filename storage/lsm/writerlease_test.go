package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// TestLiveWriterRefused: with RefuseLiveWriter a second writer does not open
// while the first one's lease is fresh, and says who holds it; without it,
// the second fences the first. A clean close frees the lease.
func TestLiveWriterRefused(t *testing.T) {
	ctx := context.Background()
	b := objstore.NewMemoryBucket()
	opts := testOptions()
	opts.RefuseLiveWriter = true
	first := openDB(t, b, opts, Components{})
	if _, err := Open(ctx, b, "db", opts, Components{Merge: concatMerge}); !errors.Is(err, ErrLiveWriter) || !strings.Contains(err.Error(), "pid=") {
		t.Fatalf("second writer while the first is live: %v, want ErrLiveWriter naming the holder", err)
	}
	if err := first.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatalf("the first writer was disturbed: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := openDB(t, b, opts, Components{})
	// Taking over on purpose fences the live writer.
	takeover := testOptions()
	third := openDB(t, b, takeover, Components{})
	defer third.Close()
	if err := second.Put(ctx, []byte("b"), []byte("2")); !errors.Is(err, ErrFenced) {
		t.Fatalf("write of the writer taken over: %v, want ErrFenced", err)
	}
	second.Close()
}

// storeClockBucket is a bucket whose clock is off by skew: the times it
// gives objects are shifted by it.
type storeClockBucket struct {
	objstore.Bucket
	skew time.Duration
}

func (b storeClockBucket) Attributes(ctx context.Context, name string) (objstore.Attributes, error) {
	a, err := b.Bucket.Attributes(ctx, name)
	a.LastModified = a.LastModified.Add(b.skew)
	return a, err
}

func (b storeClockBucket) List(ctx context.Context, prefix, startAfter string, limit int) (objstore.ListPage, error) {
	page, err := b.Bucket.List(ctx, prefix, startAfter, limit)
	for i := range page.Objects {
		page.Objects[i].LastModified = page.Objects[i].LastModified.Add(b.skew)
	}
	return page, err
}

// TestReaderLeaseStoreClockBehind: with the store's clock an hour behind,
// a live reader's lease, which the store's clock alone says is an hour
// old, is neither collected as a leftover nor ignored by a writer's close,
// which keeps the garbage the reader may still read.
func TestReaderLeaseStoreClockBehind(t *testing.T) {
	ctx := context.Background()
	b := storeClockBucket{objstore.NewMemoryBucket(), -time.Hour}
	db := openDB(t, b, testOptions(), Components{})
	rdr, err := OpenReader(ctx, b, "db", ReaderOptions{RetryBackoff: time.Millisecond}, Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	garbageRounds(t, db)
	objects := func() int { return len(listNames(t, b, "db/sst/")) + len(listNames(t, b, "db/wal/")) }
	before := objects()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := objects(); got != before {
		t.Fatalf("close with a live reader (the store's clock behind) left %d of %d tables and WAL objects", got, before)
	}
	db = openDB(t, b, testOptions(), Components{})
	defer db.Close()
	if _, err := db.collectGarbage(ctx, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := len(listNames(t, b, "db/readers/")); n != 1 {
		t.Fatalf("%d reader leases after a collection, want the live reader's", n)
	}
}

// TestLiveWriterRefusedStoreClockBehind: a store whose clock is an hour
// behind this host's makes the live writer's lease look an hour old; the
// second writer still finds it live by the writer's own stamp (and a
// reader names it), rather than fencing it without a word. A lease that
// neither clock says was renewed lately is stale.
func TestLiveWriterRefusedStoreClockBehind(t *testing.T) {
	ctx := context.Background()
	b := storeClockBucket{objstore.NewMemoryBucket(), -time.Hour}
	opts := testOptions()
	opts.RefuseLiveWriter = true
	first := openDB(t, b, opts, Components{})
	defer first.Close()
	if _, err := Open(ctx, b, "db", opts, Components{Merge: concatMerge}); !errors.Is(err, ErrLiveWriter) {
		t.Fatalf("second writer while the first is live, the store's clock an hour behind: %v, want ErrLiveWriter", err)
	}
	r, err := OpenReader(ctx, b, "db", DefaultReaderOptions(), Components{Merge: concatMerge})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if lease, err := r.WriterLease(ctx); err != nil || LeaseField(lease, "pid") == "" {
		t.Fatalf("a reader sees no live writer: %q, %v", lease, err)
	}
	if err := first.Put(ctx, []byte("a"), []byte("1")); err != nil {
		t.Fatalf("the first writer was disturbed: %v", err)
	}

	now := time.Now().Truncate(time.Second) // the lease says seconds
	lease := string(writerLease(1, "", now.Add(-time.Hour), now.Add(-time.Minute)))
	for _, c := range []struct {
		modified time.Time
		lease    string
		want     time.Duration
	}{
		{now.Add(-time.Hour), lease, time.Minute},             // the store's clock behind
		{now.Add(-10 * time.Second), lease, 10 * time.Second}, // the writer's clock behind
		{now.Add(-2 * time.Minute), lease, time.Minute},       // stale by both
		{now.Add(-2 * time.Minute), "host=a pid=1 epoch=1", 2 * time.Minute},
	} {
		if got := leaseAge(now, c.modified, c.lease).Round(time.Second); got != c.want {
			t.Errorf("leaseAge(modified %s ago, %q) = %s, want %s", now.Sub(c.modified), c.lease, got, c.want)
		}
	}
}

// TestLeaseHolderGone: a lease of a process of this host that has exited is
// no reason to refuse (a restart after kill -9); one of a live process, or
// of another host, is.
func TestLeaseHolderGone(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run a child: %v", err)
	}
	dead := cmd.Process.Pid
	for _, c := range []struct {
		lease string
		gone  bool
	}{
		{fmt.Sprintf("host=%s pid=%d epoch=3", host, dead), true},
		{fmt.Sprintf("host=%s pid=%d epoch=3", host, os.Getpid()), false},
		{fmt.Sprintf("host=%s-elsewhere pid=%d epoch=3", host, dead), false},
		{"garbage", false},
	} {
		if got := leaseHolderGone(c.lease); got != c.gone {
			t.Errorf("leaseHolderGone(%q) = %v, want %v", c.lease, got, c.gone)
		}
	}
}
