package main

import (
	"context"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaledb/shale/cache"
)

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name         string
		base         int
		live, cached int64
		want         int
	}{
		{"empty cache", 100, 400 * mib, 0, 100},
		{"live heap unknown", 100, 0, 512 * mib, 100},
		{"cache half the heap", 100, 1024 * mib, 512 * mib, 50},
		{"cache a quarter", 200, 1024 * mib, 256 * mib, 150},
		{"cache nearly all", 100, 520 * mib, 512 * mib, minGCPercent},
		{"cache over-counted", 100, 400 * mib, 512 * mib, minGCPercent},
		{"base below the floor", 5, 1024 * mib, 512 * mib, 5},
		{"large head", 25, 400 * mib, 0, 25},
		{"small heap: the headroom floor", 25, 64 * mib, 0, 50},
		{"tiny heap: at most 100", 25, 8 * mib, 0, 100},
		{"tiny heap, base above 100", 200, 8 * mib, 0, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := gcPercent(c.base, c.live, c.cached); got != c.want {
				t.Errorf("gcPercent(%d, %d, %d) = %d, want %d", c.base, c.live, c.cached, got, c.want)
			}
		})
	}
}

func TestGCBase(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range []struct {
		env  string // "" leaves GOGC unset
		set  int    // GOGC as the runtime read it from the environment
		want int
	}{
		{"", 100, defaultGCPercent},
		{"200", 200, 200},
		{"off", -1, -1},
	} {
		t.Run("GOGC="+c.env, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("GOGC", c.env)
			} else if old, ok := os.LookupEnv("GOGC"); ok {
				os.Unsetenv("GOGC")
				t.Cleanup(func() { os.Setenv("GOGC", old) })
			}
			debug.SetGCPercent(c.set)
			if got := gcBase(); got != c.want {
				t.Fatalf("gcBase() = %d, want %d", got, c.want)
			}
			if got := debug.SetGCPercent(100); got != c.want {
				t.Fatalf("GOGC after gcBase = %d, want %d", got, c.want)
			}
		})
	}
}

func TestCacheCeiling(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                string
		limit, live, cached int64
		base                int
		want, ceil          int64
	}{
		{"plenty of room", 2048 * mib, 600 * mib, 256 * mib, 25, 256 * mib, 256 * mib},
		// 2048 - 128 - 1600 - 400 < 0: the floor.
		{"head fills the limit", 2048 * mib, 1856 * mib, 256 * mib, 25, 256 * mib, 16 * mib},
		// 2048 - 128 - 1200 - 300 = 420 > 256.
		{"room for the whole budget", 2048 * mib, 1456 * mib, 256 * mib, 25, 256 * mib, 256 * mib},
		// 2048 - 128 - 1400 - 350 = 170.
		{"part of the budget", 2048 * mib, 1656 * mib, 256 * mib, 25, 256 * mib, 170 * mib},
		// The headroom is at least minGCHeadroom: 1024 - 64 - 100 - 32 = 828.
		{"small heap", 1024 * mib, 612 * mib, 512 * mib, 25, 1024 * mib, 828 * mib},
		// GOGC=off: no headroom; 1024 - 64 - 800 = 160.
		{"GOGC off", 1024 * mib, 900 * mib, 100 * mib, 0, 512 * mib, 160 * mib},
		{"cache over-counted", 2048 * mib, 100 * mib, 256 * mib, 25, 256 * mib, 256 * mib},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := cacheCeiling(c.limit, c.live, c.cached, c.base, c.want); got != c.ceil {
				t.Errorf("cacheCeiling(%d, %d, %d, %d, %d) = %d MiB, want %d MiB",
					c.limit, c.live, c.cached, c.base, c.want, got/mib, c.ceil/mib)
			}
		})
	}
}

// fakeMemoryCache is a block cache that records the caps paceMemory sets.
type fakeMemoryCache struct {
	bytes int64
	mu    sync.Mutex
	caps  []int64
}

func (f *fakeMemoryCache) capsSet() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.caps)
}

func (f *fakeMemoryCache) Stats() cache.Stats {
	return cache.Stats{Memory: cache.TierStats{Bytes: f.bytes}}
}

func (f *fakeMemoryCache) LimitMemory(n int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.caps = append(f.caps, n)
	return n
}

// TestPaceMemoryYields runs paceMemory under a memory limit the live heap
// leaves no room under: the cache is capped to its floor, and the cap is
// lifted once the limit is.
func TestPaceMemoryYields(t *testing.T) {
	const want = 256 << 20
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	synctest.Test(t, func(t *testing.T) {
		c := &fakeMemoryCache{bytes: want}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			paceMemory(ctx, 0, c, want, slog.New(slog.DiscardHandler))
		}()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if caps := c.capsSet(); len(caps) != 0 {
			t.Fatalf("no memory limit, yet the cache was capped: %v", caps)
		}
		// A limit at the floor of what the runtime accepts leaves the
		// cache nothing but its floor.
		debug.SetMemoryLimit(1 << 20)
		time.Sleep(time.Second)
		synctest.Wait()
		debug.SetMemoryLimit(math.MaxInt64)
		if caps := c.capsSet(); len(caps) != 1 || caps[0] != want/16 {
			t.Fatalf("under a 1 MiB limit the cache was capped at %v, want once at %d", caps, want/16)
		}
		// The limit lifted: the whole budget again, once the room has
		// lasted cacheLiftAfter seconds.
		time.Sleep((cacheLiftAfter - 1) * time.Second)
		synctest.Wait()
		if caps := c.capsSet(); len(caps) != 1 {
			t.Fatalf("cap lifted before %d seconds of room: %v", cacheLiftAfter, caps)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if caps := c.capsSet(); len(caps) != 2 || caps[1] != want {
			t.Fatalf("without a limit the caps were %v, want the whole budget (%d) restored once", caps, want)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if caps := c.capsSet(); len(caps) != 2 {
			t.Errorf("caps set again with nothing changed: %v", caps)
		}
		cancel()
		<-done
	})
}

func TestCacheGovernor(t *testing.T) {
	const want = 320
	g := cacheGovernor{want: want, cap: want, low: math.MaxInt64}
	step := func(ceil, cap int64, change bool) {
		t.Helper()
		if got, ch := g.next(ceil); got != cap || ch != change {
			t.Fatalf("next(%d) = %d, %v; want %d, %v", ceil, got, ch, cap, change)
		}
	}
	step(want, want, false)
	step(want-5, want, false) // less than a step (10)
	step(200, 200, true)      // falls at once
	step(150, 150, true)
	step(145, 150, false) // within a step
	// Room comes back: the window with the dip ends without a change.
	for i := 2; i <= cacheLiftAfter; i++ {
		step(300, 150, false)
	}
	// Swinging room for a whole window: the cap takes the lowest.
	for i := 1; i < cacheLiftAfter; i++ {
		step(int64(250+i%2*50), 150, false)
	}
	step(300, 250, true)
	// A dip inside the next window: it falls at once, and the window starts again.
	for i := 1; i < 10; i++ {
		step(300, 250, false)
	}
	step(100, 100, true)
	for i := 1; i < cacheLiftAfter; i++ {
		step(want, 100, false)
	}
	step(want, want, true) // the whole budget back
	for i := 0; i < 3*cacheLiftAfter; i++ {
		step(want, want, false)
	}
	// Room only a little above the cap for a whole window: no change, and a new window.
	step(200, 200, true)
	for i := 1; i < cacheLiftAfter; i++ {
		step(205, 200, false)
	}
	step(205, 200, false)
	for i := 1; i < cacheLiftAfter; i++ {
		step(want, 200, false)
	}
	step(want, want, true)
}
