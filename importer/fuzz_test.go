package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
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
		`{"metric":{"a":"1","\u0061":"2"},"values":[1],"timestamps":[1]}`,
		`{ "metric" : { "__name__" : "x\"y" , "b\\c":null, "é":"\ud83d\ude00", "d":"\u0000\n"} ,"values":[1],"timestamps":[1]}`,
		"{\"metric\":{\"a\xff\":\"\xfe\"},\"values\":[1],\"timestamps\":[1]}",
		`{"metric":{"a":1},"values":[1],"timestamps":[1]}`,
		`{"metric":["a","b"],"values":[1],"timestamps":[1]}`,
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
		// The labels are the "metric" object as encoding/json reads it
		// into a map (which would also take a repeated name).
		var asMap struct {
			Metric map[string]string `json:"metric"`
		}
		if err := json.Unmarshal(line, &asMap); err != nil {
			t.Fatalf("encoding/json refuses what the decoder took: %v", err)
		}
		if ser.Labels.Len() != len(asMap.Metric) {
			t.Fatalf("labels %s, encoding/json %v", ser.Labels, asMap.Metric)
		}
		for k, v := range asMap.Metric {
			if got, ok := labelValue(ser.Labels, k); !ok || got != v {
				t.Fatalf("label %q is %q (%v), encoding/json %q", k, got, ok, v)
			}
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

// labelValue returns the value of label name, and whether l has it (its
// value may be empty).
func labelValue(l labels.Labels, name string) (string, bool) {
	v, ok := "", false
	l.Range(func(x labels.Label) {
		if x.Name == name {
			v, ok = x.Value, true
		}
	})
	return v, ok
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
