//go:build unix

package cache

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f, the lock file path.
func lockFile(f *os.File, path string) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("cache: disk tier directory is in use by another process (%s is locked)", path)
		}
		return fmt.Errorf("cache: lock %s: %w", path, err)
	}
	return nil
}
