package cache_test

import (
	"context"
	"fmt"
	"os"

	"github.com/shaledb/shale/cache"
)

func ExampleNew() {
	dir, err := os.MkdirTemp("", "shale-cache")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	opts := cache.DefaultOptions()
	opts.MemoryBytes = 64 << 20
	opts.DiskPath = dir
	opts.DiskBytes = 1 << 30
	c, err := cache.New(opts, cache.Components{})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	readFromBucket := func(ctx context.Context) ([]byte, error) {
		return []byte("index block bytes"), nil // an object-store ranged read
	}
	block, err := c.GetOrLoad(context.Background(), "sst/000042.sst#1048576", cache.ClassMeta, readFromBucket)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(block))
	_, ok := c.Get("sst/000042.sst#1048576")
	fmt.Println(ok)
	// Output:
	// index block bytes
	// true
}
