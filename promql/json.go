package promql

import (
	"slices"
	"strconv"
	"unsafe"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"

	"github.com/shaledb/shale/internal/jsonenc"
)

// The JSON of the API is what Prometheus writes, byte for byte: json-iterator
// in its standard-library mode with the encoders Prometheus registers for
// query results (web/api/v1/json_codec.go, util/jsonutil): labels as objects
// in label order, timestamps as seconds with up to three decimals, floats as
// strings ("NaN", "+Inf"), histograms as count, sum and buckets.
//
// The encoders here append to a byte slice. Registered with json-iterator
// (by type name, for the whole process, as the upstream package does) they
// serve every answer; appendResponse uses them without json-iterator for
// the answers of queries and of the series API, the large ones.

func init() {
	register := func(typ string, f func(dst []byte, ptr unsafe.Pointer) []byte) {
		jsoniter.RegisterTypeEncoderFunc(typ, func(ptr unsafe.Pointer, s *jsoniter.Stream) {
			s.SetBuffer(f(s.Buffer(), ptr))
		}, func(unsafe.Pointer) bool { return false })
	}
	register("promql.Vector", func(b []byte, p unsafe.Pointer) []byte { return appendVector(b, *(*upstream.Vector)(p)) })
	register("promql.Matrix", func(b []byte, p unsafe.Pointer) []byte { return appendMatrix(b, *(*upstream.Matrix)(p)) })
	register("promql.Series", func(b []byte, p unsafe.Pointer) []byte { return appendSeriesJSON(b, *(*upstream.Series)(p)) })
	register("promql.Sample", func(b []byte, p unsafe.Pointer) []byte { return appendSampleJSON(b, *(*upstream.Sample)(p)) })
	register("promql.FPoint", func(b []byte, p unsafe.Pointer) []byte { return appendFPoint(b, *(*upstream.FPoint)(p)) })
	register("promql.HPoint", func(b []byte, p unsafe.Pointer) []byte { return appendHPoint(b, *(*upstream.HPoint)(p)) })
	register("exemplar.Exemplar", func(b []byte, p unsafe.Pointer) []byte { return appendExemplar(b, *(*exemplar.Exemplar)(p)) })
	jsoniter.RegisterTypeEncoderFunc("labels.Labels", func(ptr unsafe.Pointer, s *jsoniter.Stream) {
		s.SetBuffer(jsonenc.AppendLabels(s.Buffer(), *(*labels.Labels)(ptr)))
	}, func(ptr unsafe.Pointer) bool { return (*labels.Labels)(ptr).IsEmpty() })
}

var jsonAPI = jsoniter.ConfigCompatibleWithStandardLibrary

// appendResponse appends a successful answer whose data is a query's
// vector or matrix (without statistics) or the series API's label sets, and
// reports whether it could; other answers go through json-iterator.
func appendResponse(dst []byte, resp *response) ([]byte, bool) {
	if resp.Status != "success" {
		return dst, false
	}
	switch d := resp.Data.(type) {
	case *queryData:
		if d.Stats != nil {
			return dst, false
		}
		dst = append(dst, `{"status":"success","data":{"resultType":"`...)
		switch v := d.Result.(type) {
		case upstream.Matrix:
			dst = appendMatrix(append(dst, `matrix","result":`...), v)
		case upstream.Vector:
			dst = appendVector(append(dst, `vector","result":`...), v)
		default:
			return dst, false
		}
		dst = append(dst, '}')
	case []labels.Labels:
		if d == nil {
			return dst, false // null, as json-iterator writes it
		}
		// Sized up front: 200,000 series are 21 MB of JSON, which grown
		// by appending was most of the answer's CPU.
		dst = slices.Grow(dst, seriesJSONSize(d))
		dst = jsonenc.AppendList(append(dst, `{"status":"success","data":`...), d, jsonenc.AppendLabels)
	default:
		return dst, false
	}
	for _, f := range []struct {
		name string
		msgs []string
	}{{`,"warnings":`, resp.Warnings}, {`,"infos":`, resp.Infos}} {
		if len(f.msgs) == 0 {
			continue
		}
		b, err := jsonAPI.Marshal(f.msgs) // HTML-escaped, as the envelope's strings are
		if err != nil {
			return dst, false
		}
		dst = append(append(dst, f.name...), b...)
	}
	return append(dst, '}'), true
}

// seriesJSONSize is the size of the series answer of sets, exact but for
// escapes: each label's bytes and length prefixes, quotes, colon and comma,
// each set's braces and comma, and the envelope.
func seriesJSONSize(sets []labels.Labels) int {
	size := 64
	for _, ls := range sets {
		size += int(ls.ByteSize()) + 6*ls.Len() + 3
	}
	return size
}

func appendVector(dst []byte, v upstream.Vector) []byte {
	return jsonenc.AppendList(dst, v, appendSampleJSON)
}

func appendMatrix(dst []byte, m upstream.Matrix) []byte {
	return jsonenc.AppendList(dst, m, appendSeriesJSON)
}

func appendSeriesJSON(dst []byte, s upstream.Series) []byte {
	dst = jsonenc.AppendLabels(append(dst, `{"metric":`...), s.Metric)
	if len(s.Floats) > 0 {
		dst = jsonenc.AppendList(append(dst, `,"values":`...), s.Floats, appendFPoint)
	}
	if len(s.Histograms) > 0 {
		dst = jsonenc.AppendList(append(dst, `,"histograms":`...), s.Histograms, appendHPoint)
	}
	return append(dst, '}')
}

func appendSampleJSON(dst []byte, s upstream.Sample) []byte {
	dst = jsonenc.AppendLabels(append(dst, `{"metric":`...), s.Metric)
	if s.H == nil {
		return append(appendFPoint(append(dst, `,"value":`...), upstream.FPoint{T: s.T, F: s.F}), '}')
	}
	return append(appendHPoint(append(dst, `,"histogram":`...), upstream.HPoint{T: s.T, H: s.H}), '}')
}

func appendFPoint(dst []byte, p upstream.FPoint) []byte {
	dst = appendTimestamp(append(dst, '['), p.T)
	return append(appendFloat(append(dst, ','), p.F), ']')
}

func appendHPoint(dst []byte, p upstream.HPoint) []byte {
	dst = appendTimestamp(append(dst, '['), p.T)
	return append(appendHistogram(append(dst, ','), p.H), ']')
}

func appendExemplar(dst []byte, e exemplar.Exemplar) []byte {
	dst = jsonenc.AppendLabels(append(dst, `{"labels":`...), e.Labels)
	dst = appendFloat(append(dst, `,"value":`...), e.Value)
	return append(appendTimestamp(append(dst, `,"timestamp":`...), e.Ts), '}')
}

// appendTimestamp writes milliseconds as seconds: 1700000000.5 is "1700000000.500".
func appendTimestamp(dst []byte, t int64) []byte {
	if t < 0 {
		dst = append(dst, '-')
		t = -t
	}
	dst = strconv.AppendInt(dst, t/1000, 10)
	if f := t % 1000; f != 0 {
		dst = append(dst, '.')
		if f < 100 {
			dst = append(dst, '0')
		}
		if f < 10 {
			dst = append(dst, '0')
		}
		dst = strconv.AppendInt(dst, f, 10)
	}
	return dst
}

// appendFloat writes a float as a string, as the API's sample values are.
func appendFloat(dst []byte, f float64) []byte {
	return append(jsonenc.AppendFloat(append(dst, '"'), f), '"')
}

// appendHistogram writes count, sum and the non-empty buckets, each as
// [boundaries, lower, upper, count], boundaries 0: (lower, upper], 1:
// [lower, upper), 2: (lower, upper), 3: [lower, upper].
func appendHistogram(dst []byte, h *histogram.FloatHistogram) []byte {
	dst = appendFloat(append(dst, `{"count":`...), h.Count)
	dst = appendFloat(append(dst, `,"sum":`...), h.Sum)
	found := false
	for it := h.AllBucketIterator(); it.Next(); {
		b := it.At()
		if b.Count == 0 {
			continue
		}
		if found {
			dst = append(dst, ',')
		} else {
			dst = append(dst, `,"buckets":[`...)
			found = true
		}
		boundaries := byte('2')
		switch {
		case b.LowerInclusive && b.UpperInclusive:
			boundaries = '3'
		case b.LowerInclusive:
			boundaries = '1'
		case b.UpperInclusive:
			boundaries = '0'
		}
		dst = appendFloat(append(dst, '[', boundaries, ','), b.Lower)
		dst = appendFloat(append(dst, ','), b.Upper)
		dst = append(appendFloat(append(dst, ','), b.Count), ']')
	}
	if found {
		dst = append(dst, ']')
	}
	return append(dst, '}')
}
