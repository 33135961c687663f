package importer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// RemoteOptions are the settings of a RemoteSink.
type RemoteOptions struct {
	// URL is the server's base URL (http://host:port); requests go to
	// /api/v1/write under it.
	URL string
	// Version is the remote-write protocol: "2" or "1".
	Version string
	// BatchSamples is the most samples in one request.
	BatchSamples int
	// MinBackoff and MaxBackoff bound the waits between retries of a
	// request the server could not take (429, 5xx, no connection) when it
	// gives no Retry-After.
	MinBackoff, MaxBackoff time.Duration
	// Client sends the requests; nil: one with a 2-minute timeout.
	Client *http.Client
}

// RemoteSink sends batches to a running server as remote writes, retrying
// each request until the server takes it: a request gets a 2xx, or a 400
// that names what it refused (the rest of the request is stored).
type RemoteSink struct {
	opts   RemoteOptions
	target string
	logger *slog.Logger
}

// NewRemoteSink returns a sink that remote-writes to opts.URL.
func NewRemoteSink(opts RemoteOptions, logger *slog.Logger) (*RemoteSink, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want http://host:port", opts.URL)
	}
	if opts.Version != "1" && opts.Version != "2" {
		return nil, fmt.Errorf("remote-write version %q: want 1 or 2", opts.Version)
	}
	if opts.BatchSamples <= 0 {
		return nil, fmt.Errorf("remote-write batch size must be positive, got %d", opts.BatchSamples)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(opts.MinBackoff, 30*time.Second)
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 2 * time.Minute}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/write"
	return &RemoteSink{opts: opts, target: u.String(), logger: logger}, nil
}

// Write implements Sink.
func (s *RemoteSink) Write(ctx context.Context, b Batch) (Refused, error) {
	var refused Refused
	// b is left as it is: the caller counts it afterwards. off is how many
	// samples of b[0] went out already.
	off := 0
	for len(b) > 0 {
		// Whole series up to the batch size; a longer series is cut.
		var (
			req Batch
			n   int
		)
		for len(b) > 0 && n < s.opts.BatchSamples {
			ser := b[0]
			rest := ser.Samples[off:]
			if room := s.opts.BatchSamples - n; len(rest) > room {
				req = append(req, Series{Labels: ser.Labels, Samples: rest[:room]})
				off += room
				n += room
				break
			}
			req = append(req, Series{Labels: ser.Labels, Samples: rest})
			n += len(rest)
			b, off = b[1:], 0
		}
		r, err := s.send(ctx, req)
		if err != nil {
			return refused, err
		}
		refused.add(r)
	}
	return refused, nil
}

// encode returns the snappy-compressed request body for b.
func (s *RemoteSink) encode(b Batch) ([]byte, error) {
	var raw []byte
	var err error
	if s.opts.Version == "1" {
		req := prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 0, len(b))}
		for _, ser := range b {
			ts := prompb.TimeSeries{Labels: prompb.FromLabels(ser.Labels, nil)}
			for _, smp := range ser.Samples {
				switch {
				case smp.H != nil:
					ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(smp.T, smp.H))
				case smp.FH != nil:
					ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(smp.T, smp.FH))
				default:
					ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: smp.T, Value: smp.V})
				}
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		raw, err = req.Marshal()
	} else {
		syms := writev2.NewSymbolTable()
		req := writev2.Request{Timeseries: make([]writev2.TimeSeries, 0, len(b))}
		var refs []uint32
		for _, ser := range b {
			refs = syms.SymbolizeLabels(ser.Labels, refs[:0])
			var fl, hs writev2.TimeSeries
			for _, smp := range ser.Samples {
				switch {
				case smp.H != nil:
					hs.Histograms = append(hs.Histograms, writev2.FromIntHistogram(0, smp.T, smp.H))
				case smp.FH != nil:
					hs.Histograms = append(hs.Histograms, writev2.FromFloatHistogram(0, smp.T, smp.FH))
				default:
					fl.Samples = append(fl.Samples, writev2.Sample{Timestamp: smp.T, Value: smp.V})
				}
			}
			for _, ts := range []writev2.TimeSeries{fl, hs} {
				if len(ts.Samples)+len(ts.Histograms) > 0 {
					ts.LabelsRefs = append([]uint32(nil), refs...)
					req.Timeseries = append(req.Timeseries, ts)
				}
			}
		}
		req.Symbols = syms.Symbols()
		raw, err = req.Marshal()
	}
	if err != nil {
		return nil, fmt.Errorf("encode remote-write request: %w", err)
	}
	return snappy.Encode(nil, raw), nil
}

// send sends one request until the server takes it.
func (s *RemoteSink) send(ctx context.Context, b Batch) (Refused, error) {
	body, err := s.encode(b)
	if err != nil {
		return Refused{}, err
	}
	floats, hists := b.samples()
	wait := s.opts.MinBackoff
	for attempt := 1; ; attempt++ {
		refused, retryIn, err := s.try(ctx, body, floats, hists)
		if err != nil || retryIn == 0 {
			return refused, err
		}
		if retryIn < 0 {
			retryIn = wait
			wait = min(2*wait, s.opts.MaxBackoff)
		}
		if attempt == 1 || attempt%10 == 0 {
			s.logger.Warn("import: the server could not take a batch; retrying it", "attempt", attempt, "in", retryIn)
		}
		select {
		case <-ctx.Done():
			return Refused{}, fmt.Errorf("%w (while retrying a batch the server had not taken)", context.Cause(ctx))
		case <-time.After(retryIn):
		}
	}
}

// try sends body once. retryIn is 0 when done, the server's Retry-After
// when it gave one, and negative for the caller's backoff.
func (s *RemoteSink) try(ctx context.Context, body []byte, floats, hists int) (refused Refused, retryIn time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil {
		return Refused{}, 0, err
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("User-Agent", "shale-import")
	if s.opts.Version == "1" {
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	} else {
		req.Header.Set("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v2.Request")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	}
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Refused{}, 0, context.Cause(ctx)
		}
		s.logger.Debug("import: remote write failed", "err", err)
		return Refused{}, -1, nil // the server is restarting, or the network failed
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code/100 == 2:
		return Refused{}, 0, nil
	case code == http.StatusTooManyRequests || code/100 == 5:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return Refused{}, max(d, time.Millisecond), nil
		}
		return Refused{}, -1, nil
	case code == http.StatusBadRequest:
		reason := serverReason(string(msg))
		if s.opts.Version == "1" {
			// 1.0 does not say how much of the request was stored.
			refused.AddN(false, "request partly refused by the server (remote write 1.0 does not say how many samples; use 2): "+reason, floats)
			refused.AddN(true, "request partly refused by the server (remote write 1.0 does not say how many samples; use 2): "+reason, hists)
			return refused, 0, nil
		}
		ws, okS := headerInt(resp.Header, "X-Prometheus-Remote-Write-Samples-Written")
		wh, okH := headerInt(resp.Header, "X-Prometheus-Remote-Write-Histograms-Written")
		if !okS || !okH {
			return Refused{}, 0, fmt.Errorf("the server refused a batch without saying how much of it it stored (%d): %s", code, strings.TrimSpace(string(msg)))
		}
		refused.AddN(false, reason, floats-ws)
		refused.AddN(true, reason, hists-wh)
		return refused, 0, nil
	default:
		return Refused{}, 0, fmt.Errorf("the server at %s answered %s: %s", s.target, resp.Status, strings.TrimSpace(string(msg)))
	}
}

// serverReason turns the body of a 400 into a reason to count samples
// under: the first problem it names, shortened.
func serverReason(body string) string {
	lines := strings.Split(strings.TrimSpace(body), "\n")
	first := lines[0]
	if len(lines) > 1 {
		first = lines[1]
	}
	if strings.Contains(first, "out of bounds") || strings.Contains(first, "older than the retention") {
		return "older than the retention"
	}
	if len(first) > 160 {
		first = first[:160] + "..."
	}
	return "refused by the server: " + first
}

func headerInt(h http.Header, key string) (int, bool) {
	v := h.Get(key)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}
