//go:build !unix

package cache

import "time"

func processCPU() time.Duration { return 0 }
