//go:build !linux

package versitygw

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
