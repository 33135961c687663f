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

// openUnnamed is O_TMPFILE, which only Linux has.
func openUnnamed(string) (*os.File, error) { return nil, errUnnamedUnsupported }

func linkUnnamed(*os.File, string) error { return errNoProcFD }
