//go:build linux

package objstore

import (
	"errors"
	"os"
	"strconv"

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

// openUnnamed opens a new file in dir that has no name (O_TMPFILE) until
// linkUnnamed gives it one: a create if absent costs one directory
// operation instead of three (create the temporary name, rename it, and
// remove it), and a crash in between leaves nothing behind. It returns
// errUnnamedUnsupported where the kernel or filesystem has no O_TMPFILE.
// Tests replace it to take the fallback.
var openUnnamed = func(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return nil, errUnnamedUnsupported
		}
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// linkUnnamed gives f, from openUnnamed, the name final unless final exists
// (fs.ErrExist then), through /proc/self/fd (linkat with AT_EMPTY_PATH needs
// a capability); errNoProcFD without /proc.
func linkUnnamed(f *os.File, final string) error {
	proc := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	err := unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, final, unix.AT_SYMLINK_FOLLOW)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOENT) {
		if _, serr := os.Stat("/proc/self/fd"); serr != nil {
			return errNoProcFD
		}
	}
	return &os.LinkError{Op: "linkat", Old: proc, New: final, Err: err}
}
