package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

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
