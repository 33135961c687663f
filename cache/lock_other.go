//go:build !unix

package cache

import (
	"fmt"
	"os"
)

// lockDir creates the lock file without locking it: advisory locks are
// taken on Unix only.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache: open lock file: %w", err)
	}
	return f, nil
}
