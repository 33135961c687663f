package lsm

import (
	"context"
	"errors"
	"testing"

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
