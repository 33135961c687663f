package cache

import (
	"fmt"
	"os"
)

// lockDir opens the lock file path (created if absent) and locks it where the
// platform has advisory locks (lockFile), so that two processes never share a
// disk tier directory. Closing the returned file releases the lock; so does
// the process ending.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	if err := lockFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
