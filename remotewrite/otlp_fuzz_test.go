package remotewrite

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/shaledb/shale/internal/fuzzseed"
)

// FuzzOTLP decodes arbitrary bytes as an OTLP ExportMetricsServiceRequest,
// protobuf or JSON (the first byte chooses), and translates and appends
// what decodes, without the handler's recover, so any panic fails. Decoding
// errors are 400s; a decoded request is written, partly or not at all, but
// never fails otherwise. Seeds are under testdata/fuzz/FuzzOTLP; rewrite them
// with
//
//	SHALE_WRITE_FUZZ_SEEDS=1 go test -run TestWriteOTLPFuzzSeeds ./remotewrite
//
// and fuzz with
//
//	go test -run '^$' -fuzz FuzzOTLP -fuzztime 60s ./remotewrite
func FuzzOTLP(f *testing.F) {
	for _, b := range otlpSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte{0})
	f.Add([]byte{1})
	f.Add([]byte{1, '{', '}'})
	f.Add([]byte{0, 0x0a, 0x00})
	oh, _ := newOTLPHandler(f, nopAppendable{}, nil, func(o *OTLPOptions) { o.PromoteAllResourceAttributes = true })
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		isJSON := b[0]%2 == 1
		md := &otlpMetrics{}
		if err := decodeOTLP(md, b[1:], isJSON); err != nil {
			return
		}
		st := &reqState{}
		req := httptest.NewRequest(http.MethodPost, OTLPPath, nil).WithContext(context.Background())
		res := oh.ingest(req, st, md, oh.h.app.Appender(context.Background()))
		if res.code != http.StatusOK && res.code != http.StatusBadRequest {
			t.Fatalf("status %d: %s", res.code, res.msg)
		}
	})
}

// otlpSeeds are encoded requests, each prefixed with the byte that selects
// its encoding.
func otlpSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	add := func(name string, md pmetric.Metrics) {
		seeds[name+"-proto"] = append([]byte{0}, otlpProto(t, md)...)
		seeds[name+"-json"] = append([]byte{1}, otlpJSON(t, md)...)
	}
	add("payload", otlpPayload(testNow))
	add("empty", pmetric.NewMetrics())
	md := otlpPayload(testNow)
	m := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
	m.SetName("h")
	h := m.SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp := h.DataPoints().AppendEmpty()
	dp.SetTimestamp(otlpTS(testNow))
	dp.ExplicitBounds().FromRaw([]float64{1, 2})
	dp.BucketCounts().FromRaw([]uint64{1, 1, 1})
	dp.SetCount(3)
	s := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
	s.SetName("s")
	sq := s.SetEmptySummary().DataPoints().AppendEmpty()
	sq.SetTimestamp(otlpTS(testNow))
	sq.QuantileValues().AppendEmpty().SetQuantile(0.5)
	add("histogram-summary", md)
	return seeds
}

// TestWriteOTLPFuzzSeeds writes the seed corpus of FuzzOTLP.
func TestWriteOTLPFuzzSeeds(t *testing.T) {
	if os.Getenv("SHALE_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set SHALE_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	for name, b := range otlpSeeds(t) {
		if err := fuzzseed.Write("FuzzOTLP", name, b); err != nil {
			t.Fatal(err)
		}
	}
}

// otlpDecodeSeeds are requests in protobuf (isJSON false) or JSON: the
// FuzzOTLP seeds and random ones from the differential test's generator.
func otlpDecodeSeeds(t testing.TB, isJSON bool) [][]byte {
	var out [][]byte
	for _, b := range otlpSeeds(t) {
		if (b[0] == 1) == isJSON {
			out = append(out, b[1:])
		}
	}
	for c := range 8 {
		r := rand.New(rand.NewPCG(uint64(c), 7))
		g := &otlpGen{r: r, base: uint64(testNow) * 1e6}
		req := pmetricotlp.NewExportRequestFromMetrics(g.metrics())
		var b []byte
		var err error
		if isJSON {
			if b, err = req.MarshalJSON(); err == nil {
				b = mutateJSON(r, b)
			}
		} else {
			b, err = req.MarshalProto()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// pdataDecode decodes b with pdata; ok is false when pdata refuses it (or
// panics on it).
func pdataDecode(b []byte, isJSON bool) (md pmetric.Metrics, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	req := pmetricotlp.NewExportRequest()
	var err error
	if isJSON {
		err = req.UnmarshalJSON(b)
	} else {
		err = req.UnmarshalProto(b)
	}
	return req.Metrics(), err == nil
}

// FuzzOTLPProtoDecode decodes arbitrary bytes as a protobuf
// ExportMetricsServiceRequest: no panic, and what pdata accepts is
// accepted and decoded to the same content. Run with
//
//	go test -run '^$' -fuzz FuzzOTLPProtoDecode -fuzztime 60s ./remotewrite
func FuzzOTLPProtoDecode(f *testing.F) {
	for _, b := range otlpDecodeSeeds(f, false) {
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0x0b, 0x0c}) // a group inside a message
	f.Fuzz(func(t *testing.T, b []byte) {
		var m otlpMetrics
		err := decodeOTLPProto(&m, b)
		md, ok := pdataDecode(b, false)
		switch {
		case ok && err != nil:
			t.Fatalf("pdata decodes what Shale refuses: %v", err)
		case ok:
			if want, got := canonicalPdata(md), canonicalShale(&m); want != got {
				t.Fatalf("decoded differently:\npdata:\n%s\nshale:\n%s", want, got)
			}
		}
	})
}

// FuzzOTLPJSONDecode is FuzzOTLPProtoDecode for the JSON encoding. pdata's
// JSON reader takes much that is not JSON (trailing data, unquoted
// garbage after a number): only what is valid JSON must be accepted, and
// what both accept must decode the same, except for objects with an empty
// key, which ends the object for pdata's reader (and what follows is read
// as if it were after it). Run with
//
//	go test -run '^$' -fuzz FuzzOTLPJSONDecode -fuzztime 60s ./remotewrite
func FuzzOTLPJSONDecode(f *testing.F) {
	for _, b := range otlpDecodeSeeds(f, true) {
		f.Add(b)
	}
	f.Add([]byte(`{"resource_metrics":[{"resource":null,"scopeMetrics":[{"metrics":[{"name":"a","sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_CUMULATIVE","dataPoints":[{"asInt":"1","timeUnixNano":1e3}]}}]}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m otlpMetrics
		err := decodeOTLPJSON(&m, b)
		md, ok := pdataDecode(b, true)
		switch {
		case ok && err != nil && json.Valid(b) && !emptyKey.Match(b):
			t.Fatalf("pdata decodes what Shale refuses: %v", err)
		case ok && err == nil && !emptyKey.Match(b):
			if want, got := canonicalPdata(md), canonicalShale(&m); want != got {
				t.Fatalf("decoded differently:\npdata:\n%s\nshale:\n%s", want, got)
			}
		}
	})
}

// emptyKey matches an empty object key (and a string ending in an escaped
// quote before a colon, which only makes the fuzzer skip an input).
var emptyKey = regexp.MustCompile(`""\s*:`)
