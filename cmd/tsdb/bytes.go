package main

import (
	"fmt"
	"strconv"
	"strings"
)

// kingpinBytes is a byte size flag: a number with an optional unit (B, KB,
// MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024).
type kingpinBytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid byte size %q (want e.g. 512MiB)", s)
	}
	return int64(f * float64(mult)), nil
}

func (b *kingpinBytes) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = kingpinBytes(v)
	return nil
}

func (b *kingpinBytes) String() string { return strconv.FormatInt(int64(*b), 10) + "B" }

// boolValue is a boolean flag that takes its value explicitly, as in
// --storage.wal=false.
type boolValue bool

func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("invalid boolean %q (want true or false)", s)
	}
	*b = boolValue(v)
	return nil
}

func (b *boolValue) String() string { return strconv.FormatBool(bool(*b)) }

// formatBytes writes n in the largest power-of-1024 unit it has one of.
func formatBytes(n int64) string {
	for i := 3; i >= 0; i-- {
		if u := byteUnits[i]; n >= u.mult {
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
