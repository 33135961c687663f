package main

import "syscall"

// childAttr has a started server killed when the benchmark dies, so that
// no server outlives a benchmark stopped with SIGKILL.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
