//go:build !linux

package fsync

import (
	"os"
	"sync/atomic"
)

// aio is AIO where the system has it; elsewhere File calls f.Sync.
type aio struct{ completed atomic.Int64 }

func shared() *aio { return nil }

func (*aio) sync(*os.File) (error, bool) { return nil, false }
