package remotewrite

import (
	"errors"
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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		received: [nKinds]prometheus.Counter{
			kindSamples: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "shale_remotewrite_samples_received_total",
				Help: "Float samples decoded from well-formed remote-write requests.",
			}),
			kindHistograms: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "shale_remotewrite_histograms_received_total",
				Help: "Native histogram samples decoded from well-formed remote-write requests.",
			}),
			kindExemplars: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "shale_remotewrite_exemplars_received_total",
				Help: "Exemplars decoded from well-formed remote-write requests.",
			}),
		},
		rejected: [nKinds]*prometheus.CounterVec{
			kindSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "shale_remotewrite_samples_rejected_total",
				Help: "Float samples received but not written, by reason.",
			}, []string{"reason"}),
			kindHistograms: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "shale_remotewrite_histograms_rejected_total",
				Help: "Native histogram samples received but not written, by reason.",
			}, []string{"reason"}),
			kindExemplars: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "shale_remotewrite_exemplars_rejected_total",
				Help: "Exemplars received but not written, by reason.",
			}, []string{"reason"}),
		},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_remotewrite_requests_total",
			Help: "Remote-write requests by protocol version and HTTP status code.",
		}, []string{"version", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            "shale_remotewrite_request_duration_seconds",
			Help:                            "Time to read, decode, append and commit a remote-write request.",
			Buckets:                         []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: 0,
		}, []string{"version"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_remotewrite_inflight_requests",
			Help: "Remote-write requests being processed.",
		}),
	}
	// Handlers on one registry share these series.
	err := errors.Join(
		promreg.Register(reg, &m.received[kindSamples]),
		promreg.Register(reg, &m.received[kindHistograms]),
		promreg.Register(reg, &m.received[kindExemplars]),
		promreg.Register(reg, &m.rejected[kindSamples]),
		promreg.Register(reg, &m.rejected[kindHistograms]),
		promreg.Register(reg, &m.rejected[kindExemplars]),
		promreg.Register(reg, &m.requests),
		promreg.Register(reg, &m.duration),
		promreg.Register(reg, &m.inflight),
	)
	if err != nil {
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
