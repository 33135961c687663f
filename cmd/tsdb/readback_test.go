package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"

	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

// rbSeries is one series of the read-back test: what is sent, and so what
// must be read back.
type rbSeries struct {
	lset   labels.Labels
	floats []rbFloat
	hists  []rbHist
	ex     []exemplar.Exemplar
	meta   metadata.Metadata
}

type rbFloat struct {
	t int64
	v float64
}

type rbHist struct {
	t  int64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

func readbackPayload(t0 int64) []rbSeries {
	stale := math.Float64frombits(value.StaleNaN)
	out := []rbSeries{{
		lset:   labels.FromStrings("__name__", "http_requests_total", "code", "200", "job", "api"),
		floats: []rbFloat{{t0, 1}, {t0 + 1000, math.Inf(1)}, {t0 + 2000, stale}, {t0 + 3000, math.Inf(-1)}},
		ex: []exemplar.Exemplar{
			{Labels: labels.FromStrings("trace_id", "abc123"), Value: 0.5, Ts: t0, HasTs: true},
			{Labels: labels.FromStrings("span_id", "s1", "trace_id", "def456"), Value: 1.5, Ts: t0 + 1000, HasTs: true},
		},
		meta: metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served."},
	}}
	for i := range 50 {
		out = append(out, rbSeries{
			lset:   labels.FromStrings("__name__", "node_cpu_seconds_total", "cpu", fmt.Sprint(i), "job", "node"),
			floats: []rbFloat{{t0, float64(i)}, {t0 + 15_000, float64(i) + 0.25}},
			meta:   metadata.Metadata{Type: model.MetricTypeCounter, Help: "Seconds the CPUs spent in each mode."},
		})
	}
	hs := []rbSeries{
		{lset: labels.FromStrings("__name__", "rpc_latency_seconds", "job", "api"), meta: metadata.Metadata{Type: model.MetricTypeHistogram, Help: "RPC latency.", Unit: "seconds"}},
		{lset: labels.FromStrings("__name__", "queue_size", "job", "api"), meta: metadata.Metadata{Type: model.MetricTypeGaugeHistogram, Help: "Queue size."}},
		{lset: labels.FromStrings("__name__", "request_size_bytes", "job", "api"), meta: metadata.Metadata{Type: model.MetricTypeHistogram, Help: "Request size.", Unit: "bytes"}},
	}
	for j := range 3 {
		t := t0 + int64(j)*1000
		hs[0].hists = append(hs[0].hists, rbHist{t: t, h: tsdbutil.GenerateTestHistogram(int64(j))})
		hs[1].hists = append(hs[1].hists, rbHist{t: t, fh: tsdbutil.GenerateTestFloatHistogram(int64(j))})
		hs[2].hists = append(hs[2].hists, rbHist{t: t, h: tsdbutil.GenerateTestCustomBucketsHistogram(int64(j))})
	}
	hs[0].ex = []exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "h1"), Value: 0.02, Ts: t0, HasTs: true}}
	return append(out, hs...)
}

// readbackRequests encodes series as a remote write 1.0 request (metadata
// per metric family) and as a 2.0 request (metadata per series).
func readbackRequests(series []rbSeries) (*prompb.WriteRequest, *writev2.Request) {
	st := writev2.NewSymbolTable()
	v1, v2 := &prompb.WriteRequest{}, &writev2.Request{}
	for _, s := range series {
		ts1 := prompb.TimeSeries{Labels: prompb.FromLabels(s.lset, nil)}
		ts2 := writev2.TimeSeries{LabelsRefs: st.SymbolizeLabels(s.lset, nil)}
		for _, f := range s.floats {
			ts1.Samples = append(ts1.Samples, prompb.Sample{Timestamp: f.t, Value: f.v})
			ts2.Samples = append(ts2.Samples, writev2.Sample{Timestamp: f.t, Value: f.v})
		}
		for _, h := range s.hists {
			if h.h != nil {
				ts1.Histograms = append(ts1.Histograms, prompb.FromIntHistogram(h.t, h.h))
				ts2.Histograms = append(ts2.Histograms, writev2.FromIntHistogram(0, h.t, h.h))
			} else {
				ts1.Histograms = append(ts1.Histograms, prompb.FromFloatHistogram(h.t, h.fh))
				ts2.Histograms = append(ts2.Histograms, writev2.FromFloatHistogram(0, h.t, h.fh))
			}
		}
		for _, e := range s.ex {
			ts1.Exemplars = append(ts1.Exemplars, prompb.Exemplar{Labels: prompb.FromLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
			ts2.Exemplars = append(ts2.Exemplars, writev2.Exemplar{LabelsRefs: st.SymbolizeLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
		}
		ts2.Metadata = writev2.Metadata{Type: writev2.FromMetadataType(s.meta.Type), HelpRef: st.Symbolize(s.meta.Help), UnitRef: st.Symbolize(s.meta.Unit)}
		v1.Timeseries = append(v1.Timeseries, ts1)
		v1.Metadata = append(v1.Metadata, prompb.MetricMetadata{
			MetricFamilyName: s.lset.Get("__name__"), Type: prompb.FromMetadataType(s.meta.Type), Help: s.meta.Help, Unit: s.meta.Unit,
		})
		v2.Timeseries = append(v2.Timeseries, ts2)
	}
	v2.Symbols = st.Symbols()
	return v1, v2
}

// TestRemoteWriteReadBack sends remote write 1.0 and 2.0 requests with the
// upstream client library to the receiver over Shale's storage, and reads
// everything back through the querier: floats bit-exact (stale markers,
// infinities; not -0, which protobuf senders omit as a zero value), integer, float and custom-bucket histograms, exemplars and
// metadata. It reads once from the head and once after the data was written
// out to the LSM and the storage reopened.
func TestRemoteWriteReadBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  remoteapi.WriteMessageType
	}{
		{"version=1.0", remoteapi.WriteV1MessageType},
		{"version=2.0", remoteapi.WriteV2MessageType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			bucket := objstore.NewMemoryBucket()
			lopts := lsm.DefaultOptions()
			lopts.WALFlushInterval = 5 * time.Millisecond
			lopts.CompactionInterval, lopts.GCInterval = 0, 0
			db, err := openWriter(ctx, bucket, "", storage.DefaultOptions(), lopts, nil, storage.Components{})
			if err != nil {
				t.Fatal(err)
			}
			h, err := remotewrite.NewHandler(ingestAppendable{db}, remotewrite.DefaultOptions(), remotewrite.Components{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			api, err := remoteapi.NewAPI(srv.URL+"/api/v1/write", remoteapi.WithAPIHTTPClient(srv.Client()),
				remoteapi.WithAPIBackoff(remoteapi.BackoffConfig{MaxRetries: 1}), remoteapi.WithAPIPath(""))
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now().Add(-time.Minute).UnixMilli()
			sent := readbackPayload(t0)
			v1, v2 := readbackRequests(sent)
			var msg any = v1
			if tc.msg == remoteapi.WriteV2MessageType {
				msg = v2
			}
			stats, err := api.Write(ctx, tc.msg, msg)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			if tc.msg == remoteapi.WriteV2MessageType && (stats.Samples != 104 || stats.Histograms != 9 || stats.Exemplars != 3) {
				t.Fatalf("written headers: %+v, want 104 samples, 9 histograms, 3 exemplars", stats)
			}
			checkReadBack(t, db, sent, t0)
			checkExemplarsAndMetadata(t, db, sent, t0)

			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = openWriter(ctx, bucket, "", storage.DefaultOptions(), lopts, nil, storage.Components{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkReadBack(t, db, sent, t0)
		})
	}
}

func checkReadBack(t *testing.T, db *storage.DB, sent []rbSeries, t0 int64) {
	t.Helper()
	q, err := db.Querier(t0-time.Hour.Milliseconds(), t0+time.Hour.Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	got := map[string]rbSeries{}
	var it chunkenc.Iterator
	for ss.Next() {
		s := rbSeries{lset: ss.At().Labels()}
		it = ss.At().Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				s.floats = append(s.floats, rbFloat{ts, v})
			case chunkenc.ValHistogram:
				ts, h := it.AtHistogram(nil)
				s.hists = append(s.hists, rbHist{t: ts, h: h})
			case chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				s.hists = append(s.hists, rbHist{t: ts, fh: fh})
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		got[s.lset.String()] = s
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sent) {
		t.Fatalf("read back %d series, sent %d", len(got), len(sent))
	}
	for _, w := range sent {
		g, ok := got[w.lset.String()]
		if !ok {
			t.Fatalf("series %s not read back", w.lset)
		}
		if len(g.floats) != len(w.floats) || len(g.hists) != len(w.hists) {
			t.Fatalf("series %s: read back %d floats and %d histograms, sent %d and %d", w.lset, len(g.floats), len(g.hists), len(w.floats), len(w.hists))
		}
		for i, f := range w.floats {
			if g.floats[i].t != f.t || math.Float64bits(g.floats[i].v) != math.Float64bits(f.v) {
				t.Fatalf("series %s sample %d: read back (%d, %x), sent (%d, %x)", w.lset, i, g.floats[i].t, math.Float64bits(g.floats[i].v), f.t, math.Float64bits(f.v))
			}
		}
		for i, h := range w.hists {
			gh := g.hists[i]
			if gh.t != h.t {
				t.Fatalf("series %s histogram %d at %d, sent at %d", w.lset, i, gh.t, h.t)
			}
			switch {
			case h.h != nil:
				if gh.h == nil || !gh.h.Equals(withoutHint(h.h)) && !gh.h.Equals(h.h) {
					t.Fatalf("series %s histogram %d:\n read back %v\n sent      %v", w.lset, i, gh.h, h.h)
				}
			default:
				if gh.fh == nil || !gh.fh.Equals(h.fh) && !gh.fh.Equals(withoutFloatHint(h.fh)) {
					t.Fatalf("series %s float histogram %d:\n read back %v\n sent      %v", w.lset, i, gh.fh, h.fh)
				}
			}
		}
	}
}

// withoutHint drops the counter-reset hint, which storage may recompute.
func withoutHint(h *histogram.Histogram) *histogram.Histogram {
	c := h.Copy()
	c.CounterResetHint = histogram.UnknownCounterReset
	return c
}

func withoutFloatHint(h *histogram.FloatHistogram) *histogram.FloatHistogram {
	c := h.Copy()
	c.CounterResetHint = histogram.UnknownCounterReset
	return c
}

func checkExemplarsAndMetadata(t *testing.T, db *storage.DB, sent []rbSeries, t0 int64) {
	t.Helper()
	eq, err := db.ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(t0-1, t0+time.Hour.Milliseconds(), []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]exemplar.Exemplar{}
	for _, r := range res {
		got[r.SeriesLabels.String()] = r.Exemplars
	}
	for _, s := range sent {
		if len(s.ex) == 0 {
			continue
		}
		g := got[s.lset.String()]
		if len(g) != len(s.ex) {
			t.Fatalf("series %s: %d exemplars read back, sent %d", s.lset, len(g), len(s.ex))
		}
		for i, e := range s.ex {
			if !labels.Equal(g[i].Labels, e.Labels) || g[i].Value != e.Value || g[i].Ts != e.Ts {
				t.Fatalf("series %s exemplar %d: read back %+v, sent %+v", s.lset, i, g[i], e)
			}
		}
	}
	md, err := db.MetricMetadata(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sent {
		name := s.lset.Get("__name__")
		if m := md[name]; len(m) != 1 || m[0] != s.meta {
			t.Fatalf("metadata of %s: read back %v, sent %v", name, m, s.meta)
		}
	}
}

var _ http.Handler = (*remotewrite.Handler)(nil)
