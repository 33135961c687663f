//go:build unix

package sst

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used. On a
// shared machine it measures a benchmark's own work where wall time also
// counts the time other processes held the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
