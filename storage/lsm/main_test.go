package lsm

import (
	"testing"

	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

// TestMain stops the shared S3 test server and checks for leaked goroutines.
func TestMain(m *testing.M) {
	objstoretest.Main(m)
}
