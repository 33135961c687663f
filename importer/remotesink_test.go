package importer_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/shaledb/shale/importer"
)

// TestRemoteSinkRetries: 429 and 503 (with and without Retry-After) and a
// dropped connection are retried until the request is taken, and every
// sample arrives; a 400 counts what the server says it did not write.
func TestRemoteSinkRetries(t *testing.T) {
	for _, version := range []string{"1", "2"} {
		t.Run("v"+version, func(t *testing.T) {
			var (
				calls    atomic.Int64
				mu       sync.Mutex
				received = map[string]int{}
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				switch n % 4 {
				case 1:
					w.Header().Set("Retry-After", "0")
					http.Error(w, "slow down", http.StatusTooManyRequests)
					return
				case 2:
					http.Error(w, "unavailable", http.StatusServiceUnavailable)
					return
				case 3:
					hj, _ := w.(http.Hijacker)
					c, _, _ := hj.Hijack()
					c.Close()
					return
				}
				body, _ := io.ReadAll(r.Body)
				raw, err := snappy.Decode(nil, body)
				if err != nil {
					t.Errorf("snappy: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if version == "1" {
					var req prompb.WriteRequest
					if err := req.Unmarshal(raw); err != nil {
						t.Errorf("decode: %v", err)
					}
					for _, ts := range req.Timeseries {
						received[labelsString(ts.Labels)] += len(ts.Samples) + len(ts.Histograms)
					}
				} else {
					var req writev2.Request
					if err := req.Unmarshal(raw); err != nil {
						t.Errorf("decode: %v", err)
					}
					var sb labels.ScratchBuilder
					for _, ts := range req.Timeseries {
						l, err := ts.ToLabels(&sb, req.Symbols)
						if err != nil {
							t.Error(err)
						}
						received[l.String()] += len(ts.Samples) + len(ts.Histograms)
					}
					w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", "0")
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			sink, err := importer.NewRemoteSink(importer.RemoteOptions{URL: srv.URL, Version: version, BatchSamples: 7, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			var b importer.Batch
			want := map[string]int{}
			for i := range 5 {
				l := labels.FromStrings("__name__", "m", "i", string(rune('a'+i)))
				var ss []importer.Sample
				for j := range 10 {
					smp := importer.Sample{T: int64(j), V: float64(j)}
					if i == 4 && j%2 == 0 {
						smp = importer.Sample{T: int64(j), H: &histogram.Histogram{Count: 1, Sum: 1, Schema: 0, ZeroCount: 1}}
					}
					ss = append(ss, smp)
				}
				b = append(b, importer.Series{Labels: l, Samples: ss})
				want[l.String()] = 10
			}
			refused, err := sink.Write(context.Background(), b)
			if err != nil || refused.Total() != 0 {
				t.Fatalf("write: %v, refused %+v", err, refused)
			}
			for _, ser := range b {
				if len(ser.Samples) != 10 {
					t.Fatalf("Write changed the batch: %s has %d samples", ser.Labels, len(ser.Samples))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, n := range want {
				if received[k] != n {
					t.Errorf("%s: server got %d samples, want %d", k, received[k], n)
				}
			}
		})
	}
}

// TestRemoteSinkRefused: a 400 counts what the server says it did not
// write (2.0), and another 4xx stops the import.
func TestRemoteSinkRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("x") == "" && r.Header.Get("X-Prometheus-Remote-Write-Version") == "2.0.0" {
			w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", "3")
			w.Header().Set("X-Prometheus-Remote-Write-Histograms-Written", "0")
			http.Error(w, "2 rejected (written: 3 samples, 0 histograms, 0 exemplars):\nout of bounds: sample too old\n", http.StatusBadRequest)
			return
		}
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	defer srv.Close()
	b := importer.Batch{{Labels: labels.FromStrings("a", "b"), Samples: []importer.Sample{{T: 1}, {T: 2}, {T: 3}, {T: 4}, {T: 5}}}}
	sink, _ := importer.NewRemoteSink(importer.RemoteOptions{URL: srv.URL, Version: "2", BatchSamples: 100}, slog.New(slog.DiscardHandler))
	refused, err := sink.Write(context.Background(), b)
	if err != nil || refused.Samples != 2 || refused.Reasons["older than the retention"] != 2 {
		t.Fatalf("got %+v, %v", refused, err)
	}
	sink, _ = importer.NewRemoteSink(importer.RemoteOptions{URL: srv.URL, Version: "1", BatchSamples: 100}, slog.New(slog.DiscardHandler))
	if _, err := sink.Write(context.Background(), b); err == nil {
		t.Fatal("a 401 did not stop the import")
	}
}

func labelsString(ls []prompb.Label) string {
	b := labels.NewScratchBuilder(len(ls))
	for _, l := range ls {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels().String()
}
