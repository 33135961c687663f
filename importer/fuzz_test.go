package importer_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shaledb/shale/importer"
)

// FuzzDecodeVMLine: a line of outside bytes gives a series or an error,
// never a panic; a series has sorted labels and samples in strictly
// increasing time order.
func FuzzDecodeVMLine(f *testing.F) {
	for _, s := range []string{
		`{"metric":{"__name__":"up","job":"node"},"values":[1,0,1],"timestamps":[1700000000000,1700000015000,1700000030000]}`,
		`{"metric":{"__name__":"x"},"values":[1.5,"Infinity","-Infinity","NaN"],"timestamps":[3,2,1,2]}`,
		`{"metric":{"a":"b"},"values":[],"timestamps":[]}`,
		`{"metric":{},"values":[1],"timestamps":[1]}`,
		`{"metric":{"a":"b"},"values":[null],"timestamps":[1]}`,
		`{"metric":{"a":"b"},"values":[1e999],"timestamps":[1]}`,
		`{"metric":{"a":"b"},"values":[1,2],"timestamps":[1]}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var sb labels.ScratchBuilder
		ser, err := importer.DecodeVMLine(line, &sb)
		if err != nil {
			return
		}
		if !labelsSorted(ser.Labels) {
			t.Fatalf("labels not sorted: %s", ser.Labels)
		}
		for i := 1; i < len(ser.Samples); i++ {
			if ser.Samples[i].T <= ser.Samples[i-1].T {
				t.Fatalf("samples out of order at %d", i)
			}
		}
		if bytes.IndexByte(line, '\n') >= 0 {
			// JSON may span lines, and the decoder takes it; a body's
			// lines cannot hold a newline, so the reader is not asked.
			return
		}
		// The reader of whole bodies gives the same.
		r, err := importer.NewVMReader(bytes.NewReader(append(append([]byte{}, line...), '\n')))
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Next(1 << 20)
		if err != nil && err != io.EOF {
			t.Fatalf("reader refused what the decoder took: %v", err)
		}
		if len(ser.Samples) > 0 && (len(b) != 1 || len(b[0].Samples) != len(ser.Samples)) {
			t.Fatalf("reader gave %d series", len(b))
		}
	})
}

func labelsSorted(l labels.Labels) bool {
	prev, ok := "", true
	first := true
	l.Range(func(x labels.Label) {
		if !first && x.Name <= prev {
			ok = false
		}
		prev, first = x.Name, false
	})
	return ok
}

// FuzzOpenMetrics: a file of outside bytes imports or is refused whole,
// never a panic; what it gives has a timestamp and labels for every
// sample.
func FuzzOpenMetrics(f *testing.F) {
	for _, s := range []string{
		"# HELP a A.\n# TYPE a counter\na_total{x=\"y\"} 1 1700000000.000\na_total{x=\"y\"} 2 1700000015.5\n# EOF\n",
		"b 1 1\nb 2 7201\nb NaN 3\nb +Inf 4\n# EOF\n",
		"# TYPE h histogram\nh_bucket{le=\"1\"} 1 1\nh_bucket{le=\"+Inf\"} 2 1\nh_count 2 1\nh_sum 3 1\n# EOF\n",
		"c 1\n# EOF\n",
		"c 1 1\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := importer.NewOpenMetricsSource("fuzz", data)
		n := 0
		err := src.Run(context.Background(), func(b importer.Batch) error {
			for _, s := range b {
				if s.Labels.IsEmpty() || len(s.Samples) == 0 {
					t.Fatalf("empty series in a batch: %s %d", s.Labels, len(s.Samples))
				}
				n += len(s.Samples)
			}
			return nil
		})
		if err != nil && n > 0 {
			t.Fatalf("refused file handed on %d samples: %v", n, err)
		}
	})
}
