package promql

import (
	"unsafe"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	upstream "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/util/jsonutil"
)

// The JSON of the API is encoded by json-iterator in its standard-library
// mode with the extensions Prometheus registers (web/api/v1/json_codec.go),
// so that every answer is byte for byte what Prometheus sends: labels as
// objects in label order, timestamps as seconds with up to three decimals,
// floats as strings ("NaN", "+Inf"), histograms as count, sum and buckets.
// The extensions are registered by type name, for the whole process; the
// upstream package registers the same functions under the same names.

func init() {
	jsoniter.RegisterTypeEncoderFunc("promql.Vector", encodeVector, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("promql.Matrix", encodeMatrix, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("promql.Series", encodeSeriesPtr, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("promql.Sample", encodeSamplePtr, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("promql.FPoint", encodeFPointPtr, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("promql.HPoint", encodeHPointPtr, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("exemplar.Exemplar", encodeExemplar, neverEmpty)
	jsoniter.RegisterTypeEncoderFunc("labels.Labels", encodeLabelsPtr, labelsEmpty)
}

var jsonAPI = jsoniter.ConfigCompatibleWithStandardLibrary

func neverEmpty(unsafe.Pointer) bool { return false }

func labelsEmpty(ptr unsafe.Pointer) bool { return (*labels.Labels)(ptr).IsEmpty() }

func encodeVector(ptr unsafe.Pointer, s *jsoniter.Stream) {
	v := *(*upstream.Vector)(ptr)
	s.WriteArrayStart()
	for i, x := range v {
		if i > 0 {
			s.WriteMore()
		}
		writeSample(x, s)
	}
	s.WriteArrayEnd()
}

func encodeMatrix(ptr unsafe.Pointer, s *jsoniter.Stream) {
	m := *(*upstream.Matrix)(ptr)
	s.WriteArrayStart()
	for i, x := range m {
		if i > 0 {
			s.WriteMore()
		}
		writeSeries(x, s)
	}
	s.WriteArrayEnd()
}

func encodeSeriesPtr(ptr unsafe.Pointer, s *jsoniter.Stream) {
	writeSeries(*(*upstream.Series)(ptr), s)
}
func encodeSamplePtr(ptr unsafe.Pointer, s *jsoniter.Stream) {
	writeSample(*(*upstream.Sample)(ptr), s)
}
func encodeFPointPtr(ptr unsafe.Pointer, s *jsoniter.Stream) {
	writeFPoint(*(*upstream.FPoint)(ptr), s)
}
func encodeHPointPtr(ptr unsafe.Pointer, s *jsoniter.Stream) {
	writeHPoint(*(*upstream.HPoint)(ptr), s)
}
func encodeLabelsPtr(ptr unsafe.Pointer, s *jsoniter.Stream) { writeLabels(*(*labels.Labels)(ptr), s) }

func writeSeries(x upstream.Series, s *jsoniter.Stream) {
	s.WriteObjectStart()
	s.WriteObjectField(`metric`)
	writeLabels(x.Metric, s)
	if len(x.Floats) > 0 {
		s.WriteMore()
		s.WriteObjectField(`values`)
		s.WriteArrayStart()
		for i, p := range x.Floats {
			if i > 0 {
				s.WriteMore()
			}
			writeFPoint(p, s)
		}
		s.WriteArrayEnd()
	}
	if len(x.Histograms) > 0 {
		s.WriteMore()
		s.WriteObjectField(`histograms`)
		s.WriteArrayStart()
		for i, p := range x.Histograms {
			if i > 0 {
				s.WriteMore()
			}
			writeHPoint(p, s)
		}
		s.WriteArrayEnd()
	}
	s.WriteObjectEnd()
}

func writeSample(x upstream.Sample, s *jsoniter.Stream) {
	s.WriteObjectStart()
	s.WriteObjectField(`metric`)
	writeLabels(x.Metric, s)
	s.WriteMore()
	if x.H == nil {
		s.WriteObjectField(`value`)
	} else {
		s.WriteObjectField(`histogram`)
	}
	s.WriteArrayStart()
	jsonutil.MarshalTimestamp(x.T, s)
	s.WriteMore()
	if x.H == nil {
		jsonutil.MarshalFloat(x.F, s)
	} else {
		jsonutil.MarshalHistogram(x.H, s)
	}
	s.WriteArrayEnd()
	s.WriteObjectEnd()
}

func writeFPoint(p upstream.FPoint, s *jsoniter.Stream) {
	s.WriteArrayStart()
	jsonutil.MarshalTimestamp(p.T, s)
	s.WriteMore()
	jsonutil.MarshalFloat(p.F, s)
	s.WriteArrayEnd()
}

func writeHPoint(p upstream.HPoint, s *jsoniter.Stream) {
	s.WriteArrayStart()
	jsonutil.MarshalTimestamp(p.T, s)
	s.WriteMore()
	jsonutil.MarshalHistogram(p.H, s)
	s.WriteArrayEnd()
}

func encodeExemplar(ptr unsafe.Pointer, s *jsoniter.Stream) {
	e := *(*exemplar.Exemplar)(ptr)
	s.WriteObjectStart()
	s.WriteObjectField(`labels`)
	writeLabels(e.Labels, s)
	s.WriteMore()
	s.WriteObjectField(`value`)
	jsonutil.MarshalFloat(e.Value, s)
	s.WriteMore()
	s.WriteObjectField(`timestamp`)
	jsonutil.MarshalTimestamp(e.Ts, s)
	s.WriteObjectEnd()
}

func writeLabels(ls labels.Labels, s *jsoniter.Stream) {
	s.WriteObjectStart()
	first := true
	ls.Range(func(l labels.Label) {
		if !first {
			s.WriteMore()
		}
		first = false
		s.WriteString(l.Name)
		s.WriteRaw(`:`)
		s.WriteString(l.Value)
	})
	s.WriteObjectEnd()
}
