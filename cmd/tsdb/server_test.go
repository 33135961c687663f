package main

import "testing"

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
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := gcPercent(c.base, c.live, c.cached); got != c.want {
				t.Errorf("gcPercent(%d, %d, %d) = %d, want %d", c.base, c.live, c.cached, got, c.want)
			}
		})
	}
}
