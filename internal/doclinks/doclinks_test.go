// Package doclinks holds the test that keeps the links of the project's
// Markdown files pointing at files and headings that exist: README.md and
// docs/ refer to each other, to source files and to sections of
// docs/benchmarks.md, and a renamed file or heading would leave a reader at
// a dead end.
package doclinks

import (
	"bufio"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the module's folder, from this package's.
const root = "../.."

// skipDirs are folders whose Markdown is not the project's.
var skipDirs = []string{".git", ".tools", "node_modules", "bench-out"}

func TestDocLinks(t *testing.T) {
	docs := map[string]*doc{} // by path relative to root
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains(skipDirs, d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs[filepath.ToSlash(rel)] = parseDoc(string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if docs["README.md"] == nil || docs["docs/benchmarks.md"] == nil {
		t.Fatalf("README.md or docs/benchmarks.md not found under %s: %d Markdown files", root, len(docs))
	}
	links := 0
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		for _, l := range docs[name].links {
			links++
			if msg := checkLink(docs, name, l.target); msg != "" {
				t.Errorf("%s:%d: link %q: %s", name, l.line, l.target, msg)
			}
		}
	}
	t.Logf("%d links in %d Markdown files", links, len(docs))
}

// checkLink returns why target, a link of the Markdown file from (relative
// to root), leads nowhere, or "".
func checkLink(docs map[string]*doc, from, target string) string {
	if isExternal(target) {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), path)))
		if strings.HasPrefix(dest, "../") {
			return "leads outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	d := docs[dest]
	if d == nil {
		return "an anchor in a file that is not Markdown"
	}
	if !d.anchors[frag] {
		return fmt.Sprintf("no heading of %s has the anchor %q", dest, frag)
	}
	return ""
}

func isExternal(target string) bool {
	for _, p := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return false
}

type link struct {
	line   int
	target string
}

// doc is what the test needs of a Markdown file: its headings' anchors and
// its links, both outside code.
type doc struct {
	anchors map[string]bool
	links   []link
}

var (
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRE       = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// parseDoc reads headings and links, skipping fenced code blocks and code
// spans (where "# comment" is no heading and "](x)" no link).
func parseDoc(text string) *doc {
	d := &doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := slug(m[2])
			// GitHub numbers a repeated anchor: x, x-1, x-2.
			if k := seen[a]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				d.anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			d.links = append(d.links, link{line: n, target: m[1]})
		}
	}
	return d
}

// slug is the anchor GitHub gives a heading: its text lower-cased, links
// reduced to their text, every character but letters, digits, spaces,
// hyphens and underscores dropped, and each space a hyphen.
func slug(heading string) string {
	heading = inlineLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug checks the anchors of headings like the project's against those
// GitHub gives them.
func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Durable ingest against VictoriaMetrics at a536266 (2026-12-06)", "durable-ingest-against-victoriametrics-at-a536266-2026-12-06"},
		{"The first evaluation's CPU against Prometheus', and where its wall time goes (2026-12-07, 05:30-06:20 UTC)",
			"the-first-evaluations-cpu-against-prometheus-and-where-its-wall-time-goes-2026-12-07-0530-0620-utc"},
		{"Queries by range: an alert's `[5m]` against 2 h (`BenchmarkRangeCost`)", "queries-by-range-an-alerts-5m-against-2-h-benchmarkrangecost"},
		{"The server on versitygw: latency by series count (`tsdb-bench -mode=coldwarm`)", "the-server-on-versitygw-latency-by-series-count-tsdb-bench--modecoldwarm"},
		{"The same data in VictoriaMetrics v1.151.0 and in Shale's server", "the-same-data-in-victoriametrics-v11510-and-in-shales-server"},
		{"storage/lsm", "storagelsm"},
		{"A [linked](x.md) heading", "a-linked-heading"},
		{"Café – 10 × faster", "café--10--faster"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

// TestBrokenLinksFound checks that the checker finds what it must: a
// missing file, a missing anchor, an anchor counted twice, and links inside
// code left alone.
func TestBrokenLinksFound(t *testing.T) {
	d := parseDoc("# Top\n\n## Part\n\n## Part\n\n```sh\n# not a heading [x](#nowhere)\n```\n\n" +
		"See [a](#part-1), [b](#part-2), [c](#top), `[d](#code)`, [e](missing.md), [f](README.md#top), [g](https://example.com/#x).\n")
	docs := map[string]*doc{"README.md": d}
	if d.anchors["not-a-heading-xnowhere"] || len(d.anchors) != 3 {
		t.Fatalf("anchors %v: want top, part, part-1", d.anchors)
	}
	var got []string
	for _, l := range d.links {
		got = append(got, fmt.Sprintf("%s=%s", l.target, checkLink(docs, "README.md", l.target)))
	}
	want := []string{
		"#part-1=",
		`#part-2=no heading of README.md has the anchor "part-2"`,
		"#top=",
		"missing.md=no such file",
		"README.md#top=",
		"https://example.com/#x=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("links checked:\n got %q\nwant %q", got, want)
	}
}
