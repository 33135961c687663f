package cache

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// newTestCache opens a cache that the test closes when it ends.
func newTestCache(t testing.TB, opts Options) *Tiered {
	t.Helper()
	c, err := New(opts, Components{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// diskOptions are small settings with a disk tier in a fresh directory.
func diskOptions(t testing.TB) Options {
	t.Helper()
	o := DefaultOptions()
	o.MemoryBytes = 1 << 20
	o.DiskPath = t.TempDir()
	o.DiskBytes = 1 << 20
	return o
}

func testKey(i int) string { return fmt.Sprintf("obj/%06d.sst#%d", i/10, i%10*4096) }

// testValue is the block stored under testKey(i): every key has its own
// length and bytes, so a wrong block is always noticed.
func testValue(i, size int) []byte {
	return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xA5}, size/3+i%7)
}

// loadFails is a load function for blocks that must be hits.
func loadFails(t testing.TB, key string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		t.Errorf("load of %q called; want a hit", key)
		return nil, fmt.Errorf("unexpected load of %q", key)
	}
}

func mustGet(t testing.TB, c *Tiered, key string, want []byte) {
	t.Helper()
	got, ok := c.Get(key)
	if !ok {
		t.Fatalf("Get(%q) missed", key)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %x..., want %d bytes", key, len(got), got[:min(8, len(got))], len(want))
	}
}
