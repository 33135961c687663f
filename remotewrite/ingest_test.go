package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// TestTxnFail checks the accounting of a request that is rolled back or
// fails to commit: what was rejected already keeps its reason, the rest is
// rejected for the failure's reason, and nothing counts as written.
func TestTxnFail(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code       int
		reason     string
		retryAfter bool
	}{
		{err: fmt.Errorf("head full: %w", ErrOverloaded), code: http.StatusTooManyRequests, reason: "overloaded", retryAfter: true},
		{err: overloadErr{}, code: http.StatusTooManyRequests, reason: "overloaded", retryAfter: true},
		{err: fmt.Errorf("wal: %w", unavailableErr{}), code: http.StatusServiceUnavailable, reason: "unavailable", retryAfter: true},
		{err: fmt.Errorf("wal: %w", context.Canceled), code: http.StatusServiceUnavailable, reason: "canceled", retryAfter: true},
		{err: errors.New("disk on fire"), code: http.StatusInternalServerError, reason: "storage_error"},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h, _ := newTestHandler(t, newRecorder(), nil)
			tx := txn{ledger: ledger{h: h, st: &reqState{}, countNone: true, received: tally{5, 3, 2}}}
			tx.reject(kindSamples, "too_old", 1)
			tx.rejectOne(kindHistograms, "invalid_histogram", "bad histogram")
			tx.written = tally{4, 2, 2}

			res := tx.fail("commit", tc.err)
			if res.code != tc.code || res.retryAfter != tc.retryAfter || res.msg != "commit: "+tc.err.Error() {
				t.Fatalf("result %+v, want code %d, retryAfter %v, msg %q", res, tc.code, tc.retryAfter, "commit: "+tc.err.Error())
			}
			if res.samples+res.histograms+res.exemplars != 0 || tx.written != (tally{}) {
				t.Fatalf("written %v (result %+v) after a failure", tx.written, res)
			}
			if tx.rejected != tx.received {
				t.Fatalf("rejected %v, want all received %v", tx.rejected, tx.received)
			}
			for _, c := range []struct {
				k      kind
				reason string
				want   float64
			}{
				{kindSamples, "too_old", 1},
				{kindSamples, tc.reason, 4},
				{kindHistograms, "invalid_histogram", 1},
				{kindHistograms, tc.reason, 2},
				{kindExemplars, tc.reason, 2},
			} {
				if got := testutil.ToFloat64(h.m.rejected[c.k].WithLabelValues(c.reason)); got != c.want {
					t.Errorf("%s rejected{reason=%q} = %v, want %v", c.k, c.reason, got, c.want)
				}
			}
		})
	}
}

// TestRejectedAddUp checks the promise of the metrics, received = written +
// rejected for each kind, whichever item fails and however.
func TestRejectedAddUp(t *testing.T) {
	series := func(v2 bool) []recSeries {
		s := richPayload(testNow-10_000, v2)
		s = append(s,
			recSeries{ // one sample outside the time window
				Labels:  labels.FromStrings(model.MetricNameLabel, "skewed"),
				Samples: []recSample{{T: testNow, V: 1}, {T: testNow + 3_600_000, V: 2}},
			},
			recSeries{ // rejected whole
				Labels:    labels.FromStrings("job", "no_name"),
				Samples:   []recSample{{T: testNow, V: 1}, {T: testNow + 1, V: 2}},
				Exemplars: []exemplar.Exemplar{{Labels: labels.FromStrings("trace_id", "x"), Value: 1, Ts: testNow, HasTs: true}},
			},
		)
		return s
	}
	// Append and AppendHistogram calls for the payload: 5+1 samples, 8
	// histograms.
	const appends = 14
	errs := []error{storage.ErrOutOfOrderSample, ErrOverloaded, unavailableErr{}, errors.New("disk on fire")}
	type fault struct {
		name      string
		appendErr error
		at        int // the Append or AppendHistogram call that fails
		commitErr error
	}
	faults := []fault{{name: "none"}, {name: "commit", commitErr: errors.New("object store unavailable")}}
	for _, err := range errs {
		for _, at := range []int{0, 4, 7, appends - 1} {
			faults = append(faults, fault{name: fmt.Sprintf("%v at %d", err, at), appendErr: err, at: at})
		}
	}
	for _, version := range []int{1, 2} {
		for _, f := range faults {
			t.Run(fmt.Sprintf("version=%d/%s", version, f.name), func(t *testing.T) {
				rec := newRecorder()
				calls := 0
				rec.appendErr = func(labels.Labels, int64) error {
					calls++
					if f.appendErr != nil && calls-1 == f.at {
						return f.appendErr
					}
					return nil
				}
				rec.exemplarErr = func(e exemplar.Exemplar) error {
					if e.Labels.Get("trace_id") == "h1" {
						return storage.ErrOutOfOrderExemplar
					}
					return nil
				}
				rec.commitErr = f.commitErr
				h, reg := newTestHandler(t, rec, nil)
				resp := postSeries(t, h, version, series(version == 2))
				if resp.Code/100 == 2 {
					t.Fatalf("status %d: the payload has rejected items", resp.Code)
				}
				if f.appendErr != nil && calls <= f.at {
					t.Fatalf("%d appends, the fault at %d never fired", calls, f.at)
				}
				samples, hists, exemplars := rec.counts()
				for _, c := range []struct {
					name    string
					written int
				}{
					{"samples", samples},
					{"histograms", hists},
					{"exemplars", exemplars},
				} {
					received := sumCounters(t, reg, "shale_remotewrite_"+c.name+"_received_total")
					rejected := sumCounters(t, reg, "shale_remotewrite_"+c.name+"_rejected_total")
					if received == 0 || received != float64(c.written)+rejected {
						t.Errorf("%s: received %v, written %d + rejected %v", c.name, received, c.written, rejected)
					}
				}
			})
		}
	}
}

// sumCounters adds up the values of the counter family name in reg.
func sumCounters(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestCanceledRequestNotLoggedAsError: a request whose client went away
// before its commit was durable is answered 503 (whoever still listens
// retries), counted as canceled, and logged at debug level, not as an error;
// a storage failure of a live request is still an error.
func TestCanceledRequestNotLoggedAsError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cancel    bool
		commitErr error
		code      int
		reason    string
		errorLine bool
	}{
		{"client gone", true, fmt.Errorf("wal: %w", context.Canceled), http.StatusServiceUnavailable, "canceled", false},
		{"storage error", false, errors.New("disk on fire"), http.StatusInternalServerError, "storage_error", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			rec.commitErr = tc.commitErr
			var logs bytes.Buffer
			h, err := NewHandler(rec, DefaultOptions(), Components{
				Logger:     slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Registerer: prometheus.NewRegistry(),
				Now:        func() time.Time { return time.UnixMilli(testNow) },
			})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(encode(t, toV1(nodePayload(3, 1, testNow)))))
			req.Header.Set("Content-Type", "application/x-protobuf")
			req.Header.Set("Content-Encoding", "snappy")
			if tc.cancel {
				ctx, cancel := context.WithCancel(req.Context())
				cancel()
				req = req.WithContext(ctx)
			}
			resp := httptest.NewRecorder()
			h.ServeHTTP(resp, req)
			if resp.Code != tc.code {
				t.Fatalf("code %d, want %d: %s", resp.Code, tc.code, resp.Body)
			}
			if got := testutil.ToFloat64(h.m.rejected[kindSamples].WithLabelValues(tc.reason)); got != 3 {
				t.Fatalf("rejected{reason=%q} = %v, want 3", tc.reason, got)
			}
			if hasError := strings.Contains(logs.String(), "level=ERROR"); hasError != tc.errorLine {
				t.Fatalf("an ERROR line logged: %v, want %v; logs:\n%s", hasError, tc.errorLine, logs.String())
			}
		})
	}
}
