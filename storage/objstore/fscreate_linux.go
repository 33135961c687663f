//go:build linux

package objstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace is renameat2(RENAME_NOREPLACE); tests replace it to take
// the fallback.
var renameNoReplace = func(oldname, newname string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// publishNoReplace gives the fully written file tmp the name final unless
// final exists (fs.ErrExist then). renameat2(RENAME_NOREPLACE) moves the
// name in one directory operation; where the filesystem or kernel lacks it,
// link(2) is as atomic and leaves the temporary name for the caller to
// remove (linked).
func publishNoReplace(tmp, final string) (linked bool, err error) {
	err = renameNoReplace(tmp, final)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
		return false, err
	}
	if lerr := os.Link(tmp, final); lerr != nil {
		return false, lerr
	}
	return true, nil
}
