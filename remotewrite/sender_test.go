package remotewrite

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// newReceiver is the storage behind the HTTP server in the sender tests. It
// records what arrives; swapping in the storage engine (with a read-back
// through its querier) is this one line.
func newReceiver(*testing.T) *recorder { return newRecorder() }

// startServer serves the handler over app on a loopback port. The handler's
// clock is the test clock (testNow) unless realClock is set.
func startServer(t *testing.T, app Appendable, realClock bool, wrap ...func(http.Handler) http.Handler) (*httptest.Server, *Handler) {
	t.Helper()
	h, _ := newTestHandler(t, app, nil)
	if realClock {
		h.now = time.Now
	}
	var hh http.Handler = h
	for _, w := range wrap {
		hh = w(hh)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/write", hh)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
	})
	return srv, h
}

// TestUpstreamSender sends 1.0 and 2.0 requests with the upstream client
// library and checks that what arrives equals what was sent: float samples
// (stale markers and infinities bit-exact), integer, float and custom-bucket
// native histograms, exemplars, metadata and start timestamps.
func TestUpstreamSender(t *testing.T) {
	for _, tc := range []struct {
		version int
		msg     remoteapi.WriteMessageType
	}{
		{1, remoteapi.WriteV1MessageType},
		{2, remoteapi.WriteV2MessageType},
	} {
		t.Run(fmt.Sprintf("version=%d", tc.version), func(t *testing.T) {
			rcv := newReceiver(t)
			srv, _ := startServer(t, rcv, false)
			api, err := remoteapi.NewAPI(srv.URL, remoteapi.WithAPIHTTPClient(srv.Client()),
				remoteapi.WithAPIBackoff(remoteapi.BackoffConfig{MaxRetries: 1}))
			if err != nil {
				t.Fatal(err)
			}
			sent := append(richPayload(testNow-10_000, tc.version == 2), nodePayload(300, 2, testNow-60_000)...)
			var msg any = toV1(sent)
			if tc.version == 2 {
				msg = toV2(sent)
			}
			stats, err := api.Write(context.Background(), tc.msg, msg)
			if err != nil {
				t.Fatal(err)
			}
			assertSeries(t, sent, rcv.all())
			if tc.version == 2 {
				s, h, e := rcv.counts()
				if stats.Samples != s || stats.Histograms != h || stats.Exemplars != e {
					t.Fatalf("sender saw %+v written, receiver has %d/%d/%d", stats, s, h, e)
				}
			}
		})
	}
}

// TestUpstreamSenderPartialWrite checks what a sender sees on a partial
// write: an error it does not retry, with the written counts.
func TestUpstreamSenderPartialWrite(t *testing.T) {
	rcv := newReceiver(t)
	rcv.appendErr = func(lset labels.Labels, _ int64) error {
		if lset.Get("cpu") == "3" {
			return storage.ErrOutOfOrderSample
		}
		return nil
	}
	srv, _ := startServer(t, rcv, false)
	retries := 0
	api, err := remoteapi.NewAPI(srv.URL, remoteapi.WithAPIHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	sent := nodePayload(10, 2, testNow)
	stats, err := api.Write(context.Background(), remoteapi.WriteV2MessageType, toV2(sent),
		remoteapi.WithWriteRetryCallback(func(error) { retries++ }))
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "out of order sample") {
		t.Fatalf("err = %v", err)
	}
	if retries != 0 {
		t.Fatalf("sender retried a 400 %d times", retries)
	}
	if stats.Samples != 18 {
		t.Fatalf("sender saw %d samples written, want 18", stats.Samples)
	}
	if s, _, _ := rcv.counts(); s != 18 {
		t.Fatalf("receiver has %d samples", s)
	}
}
