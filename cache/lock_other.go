//go:build !unix

package cache

import "os"

// lockFile does nothing: advisory locks are taken on Unix only.
func lockFile(*os.File, string) error { return nil }
