// Package cputime measures the CPU time of the process, for benchmarks that
// report it beside wall time: on a shared machine it counts a benchmark's
// own work, where wall time also counts the time other processes held the
// cores. Only tests import it.
package cputime
