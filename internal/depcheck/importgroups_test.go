package depcheck

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// isStd reports whether an import path is the standard library's: its first
// element has no dot, as goimports tells them apart.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// importGroupProblems checks the import declarations of one Go source: each
// group (imports on consecutive lines) is either all standard library or
// none of it, and the standard library's groups come first. It returns one
// line per misplaced import.
func importGroupProblems(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []string
	// Walk the specs in order; a blank line between two specs starts a new
	// group, a comment just above a spec belongs to it.
	prevLine, groupStd, seenOther := -1, false, false
	for i, spec := range f.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return nil, err
		}
		start := spec.Pos() // its name's, if it has one
		if spec.Doc != nil {
			start = spec.Doc.Pos()
		}
		line := fset.Position(spec.Path.Pos()).Line
		std := isStd(path)
		newGroup := i == 0 || fset.Position(start).Line != prevLine+1
		switch {
		case newGroup:
			groupStd = std
		case std != groupStd:
			out = append(out, fmt.Sprintf("%s:%d: %q shares a group with imports of the other kind (standard library and others go in groups of their own)", name, line, path))
		}
		if std && seenOther {
			out = append(out, fmt.Sprintf("%s:%d: %q comes after a third-party import (the standard library's group goes first)", name, line, path))
		}
		if !std {
			seenOther = true
		}
		prevLine = fset.Position(spec.End()).Line
	}
	return out, nil
}

// moduleGoFiles lists every Go file of the module's packages, tests included.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	type goFiles struct {
		Dir                                                          string
		GoFiles, CgoFiles, TestGoFiles, XTestGoFiles, IgnoredGoFiles []string
	}
	var files []string
	for _, p := range goList[goFiles](t, "Dir,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles") {
		for _, set := range [][]string{p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles} {
			for _, f := range set {
				files = append(files, filepath.Join(p.Dir, f))
			}
		}
	}
	return files
}

// TestImportGroups keeps every Go file's imports as goimports groups them:
// the standard library first, in groups of its own.
func TestImportGroups(t *testing.T) {
	for _, name := range moduleGoFiles(t) {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		problems, err := importGroupProblems(name, src)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

func TestImportGroupProblemsDetected(t *testing.T) {
	for _, c := range []struct {
		name, imports string
		want          int // problems
	}{
		{"standard then others", "\"fmt\"\n\"os\"\n\n\"github.com/a/b\"\nx \"example.org/c\"", 0},
		{"standard only", "\"fmt\"\n\"net/http\"", 0},
		{"others only", "\"github.com/a/b\"", 0},
		{"two standard groups", "\"fmt\"\n\n\"os\"\n\n\"github.com/a/b\"", 0},
		{"a commented import starts no group", "\"fmt\"\n// why\n\"os\"\n\n\"github.com/a/b\"", 0},
		{"third-party among the standard", "\"fmt\"\n\"github.com/a/b\"\n\"os\"", 2},
		{"standard among third-party", "\"github.com/a/b\"\n\"os\"", 2},
		{"standard group last", "\"github.com/a/b\"\n\n\"os\"", 1},
		{"aliased third-party in the standard group", "\"fmt\"\nx \"github.com/a/b\"", 1},
		{"commented third-party in the standard group", "\"fmt\"\n// why\n\"github.com/a/b\"", 1},
	} {
		src := "package p\n\nimport (\n" + c.imports + "\n)\n"
		got, err := importGroupProblems(c.name+".go", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, src)
		}
		if len(got) != c.want {
			t.Errorf("%s: %d problems, want %d: %q", c.name, len(got), c.want, got)
		}
	}
}
