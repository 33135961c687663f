package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
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
		`{"metric":{"__name__":"x"},"values":[NaN,nan,Inf,-Inf,+inf,-INF,1e999,-1e999],"timestamps":[1,2,3,4,5,6,7,8]}`,
		`{"metric":{"__name__":"x"},"values":[Infinity],"timestamps":[1]}`,
		`{"metric":{"__name__":"x"},"values":[-NaN],"timestamps":[1]}`,
		`{"metric":{"a":"b"},"values":[1],"timestamps":[null]}`,
		`{"metric":{"a":"b"},"values":[1],"timestamps":[1.5]}`,
		`{"metric":{"a":"b"},"Values":[1],"timestamps":[1]}`,
		`{"metric":{"a":"b"},"metric":{"c":"d"},"values":[1],"timestamps":[1]}`,
		` { "metric" : { "a" : "b" } , "values" : [ 1 , 2 ] , "timestamps" : [ 2 , 1 ] } `,
		"{\"metric\":{\"a\":\"b\tc\"},\"values\":[1],\"timestamps\":[1]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var sb labels.ScratchBuilder
		ser, err := importer.DecodeVMLine(line, &sb)
		ref, refErr := decodeVMLineJSON(line)
		if err != nil {
			// What encoding/json reads, the decoder reads too, but for
			// what it refuses on purpose: a field in another case or
			// written twice, a label written twice, a null timestamp.
			if refErr == nil && !strings.Contains(err.Error(), "unknown field") && !strings.Contains(err.Error(), "more than once") &&
				!strings.Contains(err.Error(), "timestamp is null") && !strings.Contains(err.Error(), `missing or empty "metric"`) {
				t.Fatalf("the decoder refuses what encoding/json reads: %v", err)
			}
			return
		}
		if !labelsSorted(ser.Labels) {
			t.Fatalf("labels not sorted: %s", ser.Labels)
		}
		if refErr == nil {
			// The same labels, values and times as encoding/json reads,
			// the repeated times sorted away alike.
			if ser.Labels.Len() != len(ref.Metric) {
				t.Fatalf("labels %s, encoding/json %v", ser.Labels, ref.Metric)
			}
			for k, v := range ref.Metric {
				want := ""
				if v != nil {
					want = *v
				}
				if got, ok := labelValue(ser.Labels, k); !ok || got != want {
					t.Fatalf("label %q is %q (%v), encoding/json %q", k, got, ok, want)
				}
			}
			want := refSamples(ref)
			if len(want) != len(ser.Samples) {
				t.Fatalf("%d samples, encoding/json %d", len(ser.Samples), len(want))
			}
			for i, s := range ser.Samples {
				if s.T != want[i].T || math.Float64bits(s.V) != math.Float64bits(want[i].V) {
					t.Fatalf("sample %d is %v, encoding/json %v", i, s, want[i])
				}
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

// refLine is a line as encoding/json reads it: the decoder's reference
// for what JSON can say (no bare NaN or Inf).
type refLine struct {
	Metric     map[string]*string `json:"metric"`
	Values     []refValue         `json:"values"`
	Timestamps []int64            `json:"timestamps"`
}

type refValue float64

func (v *refValue) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return errors.New("value is null")
	}
	s := string(b)
	if b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return err
	}
	*v = refValue(f)
	return nil
}

func decodeVMLineJSON(line []byte) (refLine, error) {
	var l refLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return l, err
	}
	if rest := bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return l, errors.New("more after the object")
	}
	if len(l.Metric) == 0 || len(l.Values) != len(l.Timestamps) {
		return l, errors.New("no labels, or values and timestamps differ in number")
	}
	return l, nil
}

// refSamples returns l's samples by time, the last of a repeated time kept.
func refSamples(l refLine) []importer.Sample {
	idx := make([]int, len(l.Values))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return l.Timestamps[idx[a]] < l.Timestamps[idx[b]] })
	var out []importer.Sample
	for _, i := range idx {
		s := importer.Sample{T: l.Timestamps[i], V: float64(l.Values[i])}
		if n := len(out); n > 0 && out[n-1].T == s.T {
			out[n-1] = s
			continue
		}
		out = append(out, s)
	}
	return out
}
