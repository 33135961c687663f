package importer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/importer"
	"github.com/shaledb/shale/internal/seriestest"
)

// known is a set of samples to write out, import and read back.
type known map[string][]seriestest.Point

func (k known) add(lset labels.Labels, t int64, v float64) {
	k[lset.String()] = append(k[lset.String()], seriestest.Point{T: t, V: math.Float64bits(v)})
}

// testValues are values whose bits must survive an import.
var testValues = []float64{0, 1, -1.5, 0.1, 1e300, -1e-300, math.Inf(1), math.Inf(-1), 123456789.123456789, math.SmallestNonzeroFloat64}

// importInto imports src into a fresh storage and returns what it holds.
func importInto(t *testing.T, src importer.Source) (importer.Summary, map[string][]seriestest.Point) {
	t.Helper()
	s := openStore(t, t.TempDir(), testStorageOptions())
	defer s.stop()
	sum, err := importer.Run(context.Background(), src, importer.NewAppendableSink(appendable{s.db}, slog.New(slog.DiscardHandler)), importer.DefaultOptions())
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	return sum, seriestest.ReadAll(t, q)
}

// Three days of samples of 20 series every 15 s (both partitions and
// windows cut many times), the values testValues cycled.
func testSeries(yield func(lset labels.Labels, t int64, v float64)) {
	base := int64(1_700_000_000_000)
	for i := range 20 {
		lset := labels.FromStrings("__name__", fmt.Sprintf("metric_%d", i%3), "instance", fmt.Sprintf("host-%d", i), "job", "test")
		for j := range 3 * 24 * 240 / 10 { // every 150 s
			yield(lset, base+int64(j)*150_000, testValues[(i+j)%len(testValues)])
		}
	}
}

func TestOpenMetricsRoundTrip(t *testing.T) {
	want := known{}
	var buf bytes.Buffer
	fmt.Fprintln(&buf, "# HELP metric_0 A test metric.\n# TYPE metric_0 gauge")
	testSeries(func(lset labels.Labels, ts int64, v float64) {
		want.add(lset, ts, v)
		fmt.Fprintf(&buf, "%s{instance=%q,job=%q} %s %s\n", lset.Get("__name__"), lset.Get("instance"), lset.Get("job"), formatOM(v), formatOMTime(ts))
	})
	fmt.Fprintln(&buf, "# EOF")
	sum, got := importInto(t, importer.NewOpenMetricsSource("test", buf.Bytes()))
	seriestest.Compare(t, want, got)
	if sum.Series != len(want) || sum.Refused.Total() != 0 {
		t.Errorf("summary: %+v", sum)
	}
}

func formatOM(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return fmt.Sprint(v) // shortest representation that reads back exactly
}

// formatOMTime writes a millisecond time in seconds, as OpenMetrics says.
func formatOMTime(ms int64) string {
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

// TestOpenMetricsRefusedFiles: files promtool refuses are refused whole,
// and nothing of them is stored.
func TestOpenMetricsRefusedFiles(t *testing.T) {
	for name, tc := range map[string]struct{ in, err string }{
		"no EOF":       {"a 1 1\n", "EOF"},
		"no timestamp": {"a 1 1\nb 2\n# EOF\n", "expected timestamp"},
		"garbage":      {"a 1 1\n{{{\n# EOF\n", ""},
	} {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), testStorageOptions())
			defer s.stop()
			_, err := importer.Run(context.Background(), importer.NewOpenMetricsSource("test", []byte(tc.in)), importer.NewAppendableSink(appendable{s.db}, slog.New(slog.DiscardHandler)), importer.DefaultOptions())
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
			q, _ := s.db.Querier(math.MinInt64, math.MaxInt64)
			defer q.Close()
			if got := seriestest.ReadAll(t, q); len(got) != 0 {
				t.Errorf("stored %d series of a refused file", len(got))
			}
		})
	}
}

func TestVMRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			want := known{}
			lines := map[string]*strings.Builder{}
			var order []string
			testSeries(func(lset labels.Labels, ts int64, v float64) {
				want.add(lset, ts, v)
				k := lset.String()
				if lines[k] == nil {
					lines[k] = &strings.Builder{}
					order = append(order, k)
				}
				fmt.Fprintf(lines[k], "%d %s\n", ts, formatVM(v))
			})
			var buf bytes.Buffer
			for _, k := range order {
				lset, err := parseLabels(k)
				if err != nil {
					t.Fatal(err)
				}
				var ts, vs []string
				for _, l := range strings.Split(strings.TrimSpace(lines[k].String()), "\n") {
					a, b, _ := strings.Cut(l, " ")
					ts, vs = append(ts, a), append(vs, b)
				}
				// Reversed: a line's samples may come in any order.
				for i, j := 0, len(ts)-1; i < j; i, j = i+1, j-1 {
					ts[i], ts[j] = ts[j], ts[i]
					vs[i], vs[j] = vs[j], vs[i]
				}
				fmt.Fprintf(&buf, `{"metric":%s,"values":[%s],"timestamps":[%s]}`+"\n", jsonMetric(lset), strings.Join(vs, ","), strings.Join(ts, ","))
			}
			data := buf.Bytes()
			if gz {
				var z bytes.Buffer
				zw := gzip.NewWriter(&z)
				zw.Write(data)
				zw.Close()
				data = z.Bytes()
			}
			path := filepath.Join(t.TempDir(), "export.jsonl")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			src, err := importer.NewVMFileSource(path)
			if err != nil {
				t.Fatal(err)
			}
			sum, got := importInto(t, src)
			seriestest.Compare(t, want, got)
			if sum.Series != len(want) || sum.Refused.Total() != 0 {
				t.Errorf("summary: %+v", sum)
			}
		})
	}
}

// formatVM writes a value as VictoriaMetrics' export does: a JSON number,
// or a string for the infinities.
func formatVM(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return `"Infinity"`
	case math.IsInf(v, -1):
		return `"-Infinity"`
	}
	return fmt.Sprint(v)
}

func jsonMetric(lset labels.Labels) string {
	var parts []string
	lset.Range(func(l labels.Label) { parts = append(parts, fmt.Sprintf("%q:%q", l.Name, l.Value)) })
	return "{" + strings.Join(parts, ",") + "}"
}

func parseLabels(s string) (labels.Labels, error) {
	// s is labels.Labels.String(): {a="b", c="d"}
	b := labels.NewScratchBuilder(4)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	for _, kv := range strings.Split(s, ", ") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return labels.EmptyLabels(), fmt.Errorf("bad label %q", kv)
		}
		b.Add(k, strings.Trim(v, `"`))
	}
	b.Sort()
	return b.Labels(), nil
}

// TestImportRefusesOlderThanRetention: newest first, the storage learns
// the newest time at once; what is older than the retention before it is
// refused and counted, and everything else is stored.
func TestImportRefusesOlderThanRetention(t *testing.T) {
	var buf bytes.Buffer
	all := known{}
	newest := int64(math.MinInt64)
	testSeries(func(lset labels.Labels, ts int64, v float64) {
		all.add(lset, ts, v)
		newest = max(newest, ts)
		fmt.Fprintf(&buf, "%s{instance=%q,job=%q} %s %s\n", lset.Get("__name__"), lset.Get("instance"), lset.Get("job"), formatOM(v), formatOMTime(ts))
	})
	fmt.Fprintln(&buf, "# EOF")
	cutoff := newest - 24*3600_000
	want, refused := known{}, 0
	for k, ps := range all {
		for _, p := range ps {
			if p.T < cutoff {
				refused++
				continue
			}
			want[k] = append(want[k], p)
		}
	}
	opts := testStorageOptions()
	opts.Retention = 24 * time.Hour
	s := openStore(t, t.TempDir(), opts)
	defer s.stop()
	sum, err := importer.Run(context.Background(), importer.NewOpenMetricsSource("test", buf.Bytes()), importer.NewAppendableSink(appendable{s.db}, slog.New(slog.DiscardHandler)), importer.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if refused == 0 || sum.Refused.Samples != refused || sum.Refused.Reasons["older than the retention"] != refused {
		t.Errorf("refused %+v, want %d older than the retention", sum.Refused, refused)
	}
	q, err := s.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	seriestest.Compare(t, want, seriestest.ReadAll(t, q))
}
