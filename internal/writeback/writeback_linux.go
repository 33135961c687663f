package writeback

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFileRange is sync_file_range(2); a variable for tests.
var syncFileRange = unix.SyncFileRange

// startRange waits for the writeback of f's bytes [prev, from) and starts
// that of [from, to) without waiting for it.
func startRange(f *os.File, prev, from, to int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if from > prev {
			const waitAll = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if syncFileRange(int(fd), prev, from-prev, waitAll) != nil {
				return
			}
		}
		_ = syncFileRange(int(fd), from, to-from, unix.SYNC_FILE_RANGE_WRITE)
	})
}
