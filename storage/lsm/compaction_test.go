package lsm

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/cache/cachetest"
)

// classCache is a cachetest.Map that counts the blocks set per class.
type classCache struct {
	*cachetest.Map
	mu   sync.Mutex
	sets map[cache.Class]int
}

func (c *classCache) Set(key string, value []byte, class cache.Class) {
	c.mu.Lock()
	c.sets[class]++
	c.mu.Unlock()
	c.Map.Set(key, value, class)
}

func (c *classCache) GetOrLoad(ctx context.Context, key string, class cache.Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	return cachetest.GetOrLoad(ctx, c, key, class, load)
}

func (c *classCache) count(class cache.Class) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sets[class]
}

func TestCompactionLeavesDataBlocksOutOfCache(t *testing.T) {
	ctx := context.Background()
	c := &classCache{Map: cachetest.NewMap(), sets: map[cache.Class]int{}}
	db, _ := openMemDB(t, testOptions(), Components{Cache: c})
	const flushes, keys = 6, 300
	want := map[string]string{}
	for f := range flushes {
		var b Batch
		for k := range keys {
			key := fmt.Sprintf("key-%05d", k*flushes+f)
			val := fmt.Sprintf("value-%d-%d-%0100d", f, k, k)
			if k%7 == 0 && f > 0 {
				// An older key of the previous flush, merged.
				key = fmt.Sprintf("key-%05d", k*flushes+f-1)
				b.Merge([]byte(key), []byte("+m"))
				want[key] += "+m"
				continue
			}
			b.Put([]byte(key), []byte(val))
			want[key] = val
		}
		if err := db.Write(ctx, &b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.count(cache.ClassData); n != 0 {
		t.Fatalf("compaction put %d data blocks in the cache", n)
	}
	db.mu.Lock()
	l0, runs := len(db.man.L0), len(db.man.Runs)
	db.mu.Unlock()
	if l0 != 0 || runs != 1 {
		t.Fatalf("after compaction: %d L0 tables, %d runs; want 0 and 1", l0, runs)
	}
	for k, v := range want {
		if got, ok := mustGet(t, db, k); !ok || got != v {
			t.Fatalf("get %s = %q, %v; want %q", k, got, ok, v)
		}
	}
	if c.count(cache.ClassData) == 0 {
		t.Fatal("reads after the compaction cached no data block")
	}
}
