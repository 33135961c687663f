package remotewrite

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/shaledb/shale/internal/fuzzseed"
)

// Fuzz targets for the two decoders and for the whole append path. Seeds,
// real encoded requests included, are under testdata/fuzz; regenerate them
// with
//
//	SHALE_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./remotewrite
//
// and fuzz with, for example,
//
//	go test -run '^$' -fuzz FuzzDecodeV2 -fuzztime 60s ./remotewrite

func seedRequests(t testing.TB) (v1, v2 map[string][]byte) {
	v1, v2 = map[string][]byte{}, map[string][]byte{}
	add := func(name string, series []recSeries) {
		v1[name], v2[name] = marshal(t, toV1(series)), marshal(t, toV2(series))
	}
	add("rich", richPayload(testNow, true))
	add("node", nodePayload(5, 2, testNow))
	add("empty", nil)
	// Custom bounds on an exponential schema: the request is invalid, but
	// both decoders must still agree on what it says.
	expH, expFH := nhcbHistogram(1), nhcbFloatHistogram(1)
	expH.Schema, expFH.Schema = 0, 2
	add("custom-values-exponential-schema", []recSeries{{
		Labels: labels.FromStrings(model.MetricNameLabel, "x"),
		Hists:  []recHist{{T: testNow, H: nhcbHistogram(0)}, {T: testNow + 1, H: expH}, {T: testNow + 2, FH: expFH}},
	}})
	meta := toV1(nodePayload(1, 1, testNow))
	meta.Metadata = []prompb.MetricMetadata{{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "node_cpu_seconds_total", Help: "h", Unit: "seconds"}}
	b, err := meta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	v1["metadata"] = b
	return v1, v2
}

func addSeeds(f *testing.F, seeds map[string][]byte) {
	for _, b := range seeds {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
}

func FuzzDecodeV1(f *testing.F) {
	v1, _ := seedRequests(f)
	addSeeds(f, v1)
	f.Fuzz(func(t *testing.T, b []byte) { checkAgainstGogo(t, 1, b) })
}

func FuzzDecodeV2(f *testing.F) {
	_, v2 := seedRequests(f)
	addSeeds(f, v2)
	f.Fuzz(func(t *testing.T, b []byte) { checkAgainstGogo(t, 2, b) })
}

// FuzzIngest runs decoding, validation and appending on arbitrary messages
// without the handler's recover, so any panic fails.
func FuzzIngest(f *testing.F) {
	v1, v2 := seedRequests(f)
	for _, b := range v1 {
		f.Add(append([]byte{1}, b...))
	}
	for _, b := range v2 {
		f.Add(append([]byte{2}, b...))
	}
	h, _ := newTestHandler(f, nopAppendable{}, nil)
	// The first byte selects the protocol version.
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		version := int(b[0]%2 + 1)
		b = b[1:]
		st := &reqState{dec: decoder{maxSeries: 1 << 16}}
		if err := st.dec.decode(b, version); err != nil {
			return
		}
		res := h.ingest(httptest.NewRequest("POST", "/", nil).WithContext(context.Background()), st, version, h.app.Appender(context.Background()))
		if res.code != 200 && res.code != 400 {
			t.Fatalf("status %d: %s", res.code, res.msg)
		}
	})
}

// TestWriteFuzzSeeds writes the seed corpus files.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SHALE_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set SHALE_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	v1, v2 := seedRequests(t)
	write := func(target, name string, b []byte) {
		if err := fuzzseed.Write(target, name, b); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range v1 {
		write("FuzzDecodeV1", name, b)
		write("FuzzIngest", "v1-"+name, append([]byte{1}, b...))
	}
	for name, b := range v2 {
		write("FuzzDecodeV2", name, b)
		write("FuzzIngest", "v2-"+name, append([]byte{2}, b...))
	}
}
