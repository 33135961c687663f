//go:build !linux

package objstoretest

import "syscall"

func childProcAttr() *syscall.SysProcAttr { return nil }
