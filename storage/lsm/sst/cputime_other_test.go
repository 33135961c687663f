//go:build !unix

package sst

import "time"

func processCPU() time.Duration { return 0 }
