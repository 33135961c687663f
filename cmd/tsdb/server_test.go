package main

import (
	"os"
	"runtime/debug"
	"testing"
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
