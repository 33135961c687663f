//go:build !linux

package objstore

import "os"

// publishNoReplace gives the fully written file tmp the name final unless
// final exists (fs.ErrExist then), with link(2).
func publishNoReplace(tmp, final string) (linked bool, err error) {
	if err := os.Link(tmp, final); err != nil {
		return false, err
	}
	return true, nil
}
