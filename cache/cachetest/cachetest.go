// Package cachetest holds a cache.Cache for tests: an unbounded map that
// records the class of each block. Only tests import it.
package cachetest

import (
	"context"
	"sync"

	"github.com/shaledb/shale/cache"
)

// Map is an unbounded cache.Cache, safe for concurrent use.
type Map struct {
	mu      sync.Mutex
	m       map[string][]byte
	classes map[string]cache.Class
	loads   int
}

// NewMap returns an empty Map.
func NewMap() *Map {
	return &Map{m: map[string][]byte{}, classes: map[string]cache.Class{}}
}

// Get implements cache.Cache.
func (c *Map) Get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

// Set implements cache.Cache; it keeps every block.
func (c *Map) Set(key string, value []byte, class cache.Class) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key] = value
	c.classes[key] = class
}

// Drop removes the block under key.
func (c *Map) Drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
	delete(c.classes, key)
}

// GetOrLoad implements cache.Cache with GetOrLoad, counting the loads that
// succeed. It does not share concurrent misses of a key.
func (c *Map) GetOrLoad(ctx context.Context, key string, class cache.Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	return GetOrLoad(ctx, c, key, class, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err == nil {
			c.mu.Lock()
			c.loads++
			c.mu.Unlock()
		}
		return v, err
	})
}

// Keys returns the keys held, in no order.
func (c *Map) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.m))
	for k := range c.m {
		out = append(out, k)
	}
	return out
}

// Count returns how many blocks of class are held.
func (c *Map) Count(class cache.Class) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, cl := range c.classes {
		if cl == class {
			n++
		}
	}
	return n
}

// Loads returns how many loads GetOrLoad made that succeeded.
func (c *Map) Loads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loads
}

// GetOrLoad is cache.Cache's GetOrLoad for a test cache c: c's Get, else
// load and c's Set, so that a cache wrapping a Map with a Set of its own
// sees the Set.
func GetOrLoad(ctx context.Context, c interface {
	Get(string) ([]byte, bool)
	Set(string, []byte, cache.Class)
}, key string, class cache.Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if v, ok := c.Get(key); ok {
		return v, nil
	}
	v, err := load(ctx)
	if err != nil {
		return nil, err
	}
	c.Set(key, v, class)
	return v, nil
}
