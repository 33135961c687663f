// Package corrupt holds the one marker of corrupt data in Shale: bytes read
// back from an object store, a cache file or a block that fail validation (bad
// checksum or magic, truncated, malformed). Every Shale package that decodes
// bytes reports corruption with an error that wraps Err, so a caller can test
// for corruption found anywhere below it:
//
//	if errors.Is(err, corrupt.Err) { ... }
//
// Each package keeps its own sentinel (gorilla.ErrCorrupt, sst.ErrCorrupt,
// ...), made with New, for callers that care where the corruption was found.
//
// The package imports only the standard library, so that every other package
// may import it. It is not internal because users of Shale's packages test
// for Err too.
package corrupt

import "errors"

// Err marks corrupt data; test for it with errors.Is.
var Err = errors.New("corrupt data")

// New returns a package's own corruption sentinel: an error whose message is
// msg and which wraps Err, so errors.Is(err, sentinel) and errors.Is(err,
// Err) both hold for an error that wraps the sentinel. Call it once, in a
// package-level var.
func New(msg string) error {
	return &sentinel{msg: msg}
}

type sentinel struct{ msg string }

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return Err }
