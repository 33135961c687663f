//go:build unix

package cache

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive advisory lock on path (created if absent), so
// that two processes never share a disk tier directory. Closing the returned
// file releases the lock; so does the process ending.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cache: disk tier directory is in use by another process (%s is locked)", path)
		}
		return nil, fmt.Errorf("cache: lock %s: %w", path, err)
	}
	return f, nil
}
