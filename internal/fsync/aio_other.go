//go:build !linux

package fsync

import "os"

// aio is AIO where the system has it; elsewhere File calls f.Sync.
type aio struct{}

func shared() *aio { return nil }

func (*aio) sync(*os.File) (bool, error) { return false, nil }

func completedAIO() int64 { return 0 }
