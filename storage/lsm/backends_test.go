package lsm

import (
	"testing"

	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

// TestBackends runs the model test on every object store backend: memory,
// the local filesystem and a real S3-compatible server (kept short there).
func TestBackends(t *testing.T) {
	for name, newBucket := range objstoretest.Backends(t) {
		t.Run("backend="+name, func(t *testing.T) {
			steps := 150
			if name == "s3" {
				steps = 60
			}
			for _, wal := range []bool{true, false} {
				runModel(t, newBucket(t), modelConfig{wal: wal, seed: 11, steps: steps})
			}
		})
	}
}
