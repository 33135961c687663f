//go:build linux

package objstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// hardLink is os.Link; tests replace it to take the fallback.
var hardLink = os.Link

// publishNoReplace gives the fully written file tmp the name final unless
// final exists (fs.ErrExist then). link(2) is the portable way; where the
// filesystem has no hard links, renameat2(RENAME_NOREPLACE) is as atomic.
func publishNoReplace(tmp, final string) (linked bool, err error) {
	err = hardLink(tmp, final)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.ENOSYS) {
		return false, err
	}
	if rerr := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); rerr != nil {
		if errors.Is(rerr, unix.EEXIST) {
			return false, &os.LinkError{Op: "renameat2", Old: tmp, New: final, Err: rerr}
		}
		return false, err // report why link failed
	}
	return false, nil
}
