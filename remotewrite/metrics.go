package remotewrite

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
)

// metrics of the receiver. received counts what well-formed requests carried;
// rejected{reason} counts what of it was not written, so written = received -
// rejected. Both are indexed by kind.
type metrics struct {
	received [nKinds]prometheus.Counter
	rejected [nKinds]*prometheus.CounterVec
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
	// inflightBytes is what the requests let in hold (max_inflight_bytes).
	inflightBytes prometheus.Gauge
}

// kindMetrics name the received and rejected counters of each kind
// (shale_remotewrite_<noun>_received_total and _rejected_total) and say what
// they count.
var kindMetrics = [nKinds]struct{ noun, what string }{
	kindSamples:    {"samples", "Float samples"},
	kindHistograms: {"histograms", "Native histogram samples"},
	kindExemplars:  {"exemplars", "Exemplars"},
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Handlers on one registry share these series.
	set := promreg.NewSet(reg)
	m := &metrics{}
	for k, km := range kindMetrics {
		m.received[k] = set.Counter("shale_remotewrite_"+km.noun+"_received_total",
			km.what+" decoded from well-formed remote-write requests.")
	}
	for k, km := range kindMetrics {
		m.rejected[k] = set.CounterVec("shale_remotewrite_"+km.noun+"_rejected_total",
			km.what+" received but not written, by reason.", "reason")
	}
	m.requests = set.CounterVec("shale_remotewrite_requests_total",
		"Remote-write requests by protocol version and HTTP status code.", "version", "code")
	m.duration = set.HistogramVec(prometheus.HistogramOpts{
		Name:                            "shale_remotewrite_request_duration_seconds",
		Help:                            "Time to read, decode, append and commit a remote-write request.",
		Buckets:                         []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: 0,
	}, "version")
	m.inflight = set.Gauge("shale_remotewrite_inflight_requests", "Remote-write requests being processed.")
	m.inflightBytes = set.Gauge("shale_remotewrite_inflight_bytes",
		"Bytes of the remote-write and OTLP requests being received, decoded and appended: their bodies as they arrive and as decompressed (max_inflight_bytes).")
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("remotewrite: register metrics: %w", err)
	}
	return m, nil
}

func versionLabel(v int) string {
	switch v {
	case 1:
		return "1.0"
	case 2:
		return "2.0"
	}
	return "unknown"
}

func codeLabel(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 400:
		return "400"
	case 413:
		return "413"
	case 415:
		return "415"
	case 429:
		return "429"
	case 500:
		return "500"
	}
	return strconv.Itoa(code)
}
