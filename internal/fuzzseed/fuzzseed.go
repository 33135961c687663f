// Package fuzzseed writes the seed corpus files of fuzz targets, in the
// format go test reads from testdata/fuzz/<target>/<name>. Only tests
// import it.
package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
)

// Encode returns the corpus file of one call of a fuzz target with args,
// in the target's order, each a []byte or a bool.
func Encode(args ...any) []byte {
	b := []byte("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			b = fmt.Appendf(b, "[]byte(%q)\n", v)
		case bool:
			b = fmt.Appendf(b, "bool(%t)\n", v)
		default:
			panic(fmt.Sprintf("fuzzseed: an argument of type %T", a))
		}
	}
	return b
}

// Path is the file of the seed name of target, relative to the folder of
// the target's package.
func Path(target, name string) string {
	return filepath.Join("testdata", "fuzz", target, name)
}

// Write writes the corpus file of args as the seed name of target,
// creating its folder.
func Write(target, name string, args ...any) error {
	p := Path(target, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, Encode(args...), 0o644)
}
