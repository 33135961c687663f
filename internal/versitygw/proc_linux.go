//go:build linux

package versitygw

import "syscall"

// childProcAttr kills the server when the test binary dies without stopping it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
