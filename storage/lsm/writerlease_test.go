package lsm

import (
	"context"
	"errors"
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
