//go:build !linux

package main

import "syscall"

// childAttr is nil where the kernel cannot kill a child with its parent:
// a server outlives a benchmark stopped with SIGKILL there (the benchmark
// stops its servers on every other exit).
func childAttr() *syscall.SysProcAttr { return nil }
