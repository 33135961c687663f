//go:build !linux

package cache

// freeBytes cannot tell the free space here: the disk tier keeps its budget.
func freeBytes(string) (int64, bool) { return 0, false }
