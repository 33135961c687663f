package promql

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	v1 "github.com/prometheus/prometheus/web/api/v1"
	"github.com/stretchr/testify/require"
)

// upstreamJSON is the answer as Prometheus' own codec writes it.
func upstreamJSON(t testing.TB, d *queryData, warnings, infos []string) []byte {
	t.Helper()
	b, err := v1.JSONCodec{}.Encode(&v1.Response{Status: "success", Data: &v1.QueryData{ResultType: d.ResultType, Result: d.Result, Stats: d.Stats}, Warnings: warnings, Infos: infos})
	require.NoError(t, err)
	return b
}

// FuzzQueryJSON checks that query answers are encoded byte for byte as the
// upstream codec encodes them, for random vectors and matrices: labels with
// control characters, quotes, HTML, Unicode and invalid UTF-8; NaN, ±Inf,
// -0, tiny and huge floats; negative and fractional timestamps; native
// histograms of every schema; warnings and infos.
func FuzzQueryJSON(f *testing.F) {
	for seed := range uint64(64) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		d := &queryData{ResultType: parser.ValueTypeMatrix, Result: randomMatrix(r)}
		if r.IntN(2) == 0 {
			d = &queryData{ResultType: parser.ValueTypeVector, Result: randomVector(r)}
		}
		var warnings, infos []string
		for range r.IntN(3) {
			warnings = append(warnings, randomString(r))
		}
		for range r.IntN(2) {
			infos = append(infos, randomString(r))
		}
		got, ok := appendResponse(nil, &response{Status: "success", Data: d, Warnings: warnings, Infos: infos})
		require.True(t, ok)
		require.Equal(t, string(upstreamJSON(t, d, warnings, infos)), string(got))
		// The same encoders serve through json-iterator.
		viaIter, err := jsonAPI.Marshal(&response{Status: "success", Data: d, Warnings: warnings, Infos: infos})
		require.NoError(t, err)
		require.Equal(t, string(got), string(viaIter))
	})
}

// FuzzSeriesJSON checks the series API's answer, random label sets with
// warnings and infos, against the upstream codec.
func FuzzSeriesJSON(f *testing.F) {
	for seed := range uint64(32) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
		sets := []labels.Labels{}
		for range r.IntN(50) {
			sets = append(sets, randomLabels(r))
		}
		var warnings, infos []string
		for range r.IntN(3) {
			warnings = append(warnings, randomString(r))
		}
		for range r.IntN(2) {
			infos = append(infos, randomString(r))
		}
		resp := &response{Status: "success", Data: sets, Warnings: warnings, Infos: infos}
		got, ok := appendResponse(nil, resp)
		require.True(t, ok)
		want, err := v1.JSONCodec{}.Encode(&v1.Response{Status: "success", Data: sets, Warnings: warnings, Infos: infos})
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		viaIter, err := jsonAPI.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, string(got), string(viaIter))
	})
}

// TestSeriesJSONSized checks that the series API's answer is sized up front:
// for label sets without escapes the estimate is at least the answer, so
// the buffer is allocated once.
func TestSeriesJSONSized(t *testing.T) {
	sets := make([]labels.Labels, 5000)
	for i := range sets {
		sets[i] = labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", strconv.Itoa(i%64), "instance", fmt.Sprintf("host-%05d:9100", i/64), "mode", "idle")
	}
	got, ok := appendResponse(nil, &response{Status: "success", Data: sets})
	require.True(t, ok)
	require.LessOrEqual(t, len(got), seriesJSONSize(sets))
	require.Greater(t, len(got), seriesJSONSize(sets)*9/10, "the estimate is far above the answer")
}

var awkward = []string{"", "a", "job", "__name__", "<b>&", `"q"`, `back\slash`, "tab\there", "new\nline", "\x00\x01\x1f\x7f", "é€𝄞", "\xff\xfe", "\u2028\u2029", "le"}

func randomString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return strconv.Itoa(r.IntN(1000))
	}
	return awkward[r.IntN(len(awkward))] + awkward[r.IntN(len(awkward))]
}

func randomLabels(r *rand.Rand) labels.Labels {
	b := labels.NewScratchBuilder(4)
	for range r.IntN(5) {
		b.Add(randomString(r)+strconv.Itoa(r.IntN(9)), randomString(r))
	}
	b.Sort()
	return b.Labels()
}

var awkwardFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-7, -1e-7, 1e-6, 1e21, -1e21, 1e20, 123456789.123, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}

func randomFloat(r *rand.Rand) float64 {
	if r.IntN(2) == 0 {
		return awkwardFloats[r.IntN(len(awkwardFloats))]
	}
	return (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(40)-20))
}

func randomTimestamp(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return -r.Int64N(1e13)
	case 1:
		return r.Int64N(1000)
	default:
		return 1_700_000_000_000 + r.Int64N(1e9)
	}
}

func randomHistogram(r *rand.Rand) *histogram.FloatHistogram {
	h := &histogram.FloatHistogram{
		Schema:        int32(r.IntN(12) - 4),
		ZeroThreshold: []float64{0, 1e-128, 0.001}[r.IntN(3)],
		ZeroCount:     float64(r.IntN(3)),
		Count:         randomFloat(r),
		Sum:           randomFloat(r),
	}
	if r.IntN(5) == 0 {
		h.Schema = histogram.CustomBucketsSchema
		h.CustomValues = []float64{0.1, 1, 10}
		h.ZeroThreshold, h.ZeroCount = 0, 0
		h.PositiveSpans = []histogram.Span{{Offset: 0, Length: 3}}
		h.PositiveBuckets = []float64{1, 0, 2}
		return h
	}
	spans := func() ([]histogram.Span, []float64) {
		var s []histogram.Span
		var b []float64
		for range r.IntN(3) {
			n := uint32(r.IntN(3) + 1)
			s = append(s, histogram.Span{Offset: int32(r.IntN(5) - 2), Length: n})
			for range n {
				b = append(b, float64(r.IntN(3)))
			}
		}
		return s, b
	}
	h.PositiveSpans, h.PositiveBuckets = spans()
	h.NegativeSpans, h.NegativeBuckets = spans()
	return h
}

func randomMatrix(r *rand.Rand) upstream.Matrix {
	m := upstream.Matrix{}
	for range r.IntN(4) {
		s := upstream.Series{Metric: randomLabels(r)}
		for range r.IntN(5) {
			s.Floats = append(s.Floats, upstream.FPoint{T: randomTimestamp(r), F: randomFloat(r)})
		}
		for range r.IntN(3) {
			s.Histograms = append(s.Histograms, upstream.HPoint{T: randomTimestamp(r), H: randomHistogram(r)})
		}
		m = append(m, s)
	}
	return m
}

func randomVector(r *rand.Rand) upstream.Vector {
	v := upstream.Vector{}
	for range r.IntN(5) {
		s := upstream.Sample{Metric: randomLabels(r), T: randomTimestamp(r), F: randomFloat(r)}
		if r.IntN(3) == 0 {
			s.H = randomHistogram(r)
		}
		v = append(v, s)
	}
	return v
}

// benchMatrix is the answer of a range query over series of six labels:
// floats, or native histograms of 20 buckets.
func benchMatrix(series, points int, hist bool) upstream.Matrix {
	m := make(upstream.Matrix, series)
	for i := range m {
		m[i].Metric = labels.FromStrings("__name__", "http_requests_total", "job", "api-server", "instance", "10.0.0."+strconv.Itoa(i)+":9090",
			"method", "GET", "path", "/api/v1/query", "status", "200")
		for j := range points {
			t := int64(1_700_000_000_000 + j*15_000)
			if !hist {
				m[i].Floats = append(m[i].Floats, upstream.FPoint{T: t, F: float64(j) * 1.37 / float64(i+1)})
				continue
			}
			h := &histogram.FloatHistogram{Schema: 3, Count: float64(j * 20), Sum: float64(j) * 3.3,
				PositiveSpans: []histogram.Span{{Offset: -5, Length: 20}}}
			for k := range 20 {
				h.PositiveBuckets = append(h.PositiveBuckets, float64(j+k))
			}
			m[i].Histograms = append(m[i].Histograms, upstream.HPoint{T: t, H: h})
		}
	}
	return m
}

// BenchmarkRangeQueryJSON encodes the answer of a range query as this
// package does and as Prometheus' codec (json-iterator) does.
//
//	go test ./promql -run '^$' -bench RangeQueryJSON -count 6 | benchstat -col /encoder -
func BenchmarkRangeQueryJSON(b *testing.B) {
	for _, c := range []struct {
		name           string
		series, points int
		hist           bool
	}{
		{"floats_100x1000", 100, 1000, false},
		{"histograms_10x240", 10, 240, true},
	} {
		d := &queryData{ResultType: parser.ValueTypeMatrix, Result: benchMatrix(c.series, c.points, c.hist)}
		resp := &response{Status: "success", Data: d}
		b.Run("result="+c.name+"/encoder=upstream", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				n = len(upstreamJSON(b, d, nil, nil))
			}
			b.SetBytes(int64(n))
		})
		b.Run("result="+c.name+"/encoder=shale", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				buf, release, err := encode(resp)
				if err != nil {
					b.Fatal(err)
				}
				n = len(buf)
				release()
			}
			b.SetBytes(int64(n))
		})
	}
}
