package depcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackagesDocumented checks that every package of the module has a row
// in README.md's table of packages and is named in docs/design.md's table of
// parts: a new package is where a reader of either looks first.
func TestPackagesDocumented(t *testing.T) {
	readme := readDoc(t, "README.md")
	design := readDoc(t, "docs/design.md")
	var rels []string
	for _, p := range listPackages(t) {
		rels = append(rels, strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/"))
	}
	for _, missing := range undocumented(rels, readme, design) {
		t.Error(missing)
	}
}

// undocumented returns a line for each package of rels (relative to the
// module) that readme's table or design's has not.
func undocumented(rels []string, readme, design string) []string {
	var out []string
	for _, rel := range rels {
		if !strings.Contains(readme, "\n| `"+rel+"` |") {
			out = append(out, "README.md has no row for package "+rel+" in its table of packages")
		}
		if !tableNames(design, rel) {
			out = append(out, "docs/design.md does not name package "+rel+" in its table of parts")
		}
	}
	return out
}

// tableNames reports whether a table row of doc names rel, as `rel`, in its
// first cell.
func tableNames(doc, rel string) bool {
	for _, line := range strings.Split(doc, "\n") {
		row, ok := strings.CutPrefix(line, "| ")
		if !ok {
			continue
		}
		if first, _, ok := strings.Cut(row, " |"); ok && strings.Contains(first, "`"+rel+"`") {
			return true
		}
	}
	return false
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUndocumentedFound(t *testing.T) {
	readme := "# x\n\n| package | what |\n| --- | --- |\n| `a` | one |\n| `b/c` | two |\nsee `d` here\n"
	design := "| package | what | imports |\n| --- | --- | --- |\n| `a`, `b/c` | both | `d` |\n\nText naming `b` | with a bar.\n"
	got := undocumented([]string{"a", "b/c", "b", "d"}, readme, design)
	want := []string{
		"README.md has no row for package b in its table of packages",
		"docs/design.md does not name package b in its table of parts",
		"README.md has no row for package d in its table of packages",
		"docs/design.md does not name package d in its table of parts",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
