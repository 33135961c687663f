package remotewrite

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// postTo is post with the request's query string.
func postTo(t *testing.T, h http.Handler, query, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/write?"+query, bytesReader(body))
	req.Header.Set("Content-Type", contentType)
	if contentType != ContentTypeOTLPProto {
		req.Header.Set("Content-Encoding", "snappy")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestExtraLabels: VictoriaMetrics' extra_label arguments set a label on
// every series of a remote-write (1.0 and 2.0, with the series resolved in
// batches or appended one by one) and an OTLP request, replacing one of the
// same name, and an empty value removes it; a malformed one is refused with
// 400 before anything is stored.
func TestExtraLabels(t *testing.T) {
	const query = "extra_label=env=prod&extra_label=region=eu&extra_label=drop="
	series := []recSeries{
		{Labels: labels.FromStrings("__name__", "up", "env", "dev", "job", "a"), Samples: []recSample{{T: testNow, V: 1}}},
		{Labels: labels.FromStrings("__name__", "up", "drop", "me", "job", "b"), Samples: []recSample{{T: testNow, V: 0}}},
	}
	want := []labels.Labels{
		labels.FromStrings("__name__", "up", "env", "prod", "job", "a", "region", "eu"),
		labels.FromStrings("__name__", "up", "env", "prod", "job", "b", "region", "eu"),
	}
	for _, version := range []int{1, 2} {
		for _, resolving := range []bool{false, true} {
			t.Run(fmt.Sprintf("version=%d/resolving=%v", version, resolving), func(t *testing.T) {
				rec := newRecorder()
				var app Appendable = rec
				if resolving {
					app = &resolvingRecorder{recorder: rec, firstT: map[string]int64{}}
				}
				h, _ := newTestHandler(t, app, nil)
				body, ct := encode(t, toV1(series)), "application/x-protobuf"
				if version == 2 {
					body, ct = encode(t, toV2(series)), ContentTypeV2
				}
				assertCode(t, postTo(t, h, query, ct, body), http.StatusNoContent, "")
				for _, w := range want {
					if s := rec.get(w); s == nil || len(s.Samples) != 1 {
						t.Errorf("series %s not stored with its sample; stored %v", w, rec.all())
					}
				}
				if n := len(rec.all()); n != len(want) {
					t.Errorf("%d series stored, want %d", n, len(want))
				}
				// The next request, through the same pooled state, sets none.
				assertCode(t, postTo(t, h, "", ct, body), http.StatusNoContent, "")
				for _, s := range series {
					if rec.get(s.Labels) == nil {
						t.Errorf("series %s of a request without extra_label not stored as sent; stored %v", s.Labels, rec.all())
					}
				}

				rec2 := newRecorder()
				h2, _ := newTestHandler(t, rec2, nil)
				w := postTo(t, h2, "extra_label=novalue", ct, body)
				if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "extra_label") {
					t.Errorf("a malformed extra_label: %d %q, want 400 naming extra_label", w.Code, w.Body)
				}
				if n := len(rec2.all()); n != 0 {
					t.Errorf("%d series stored from a refused request", n)
				}
			})
		}
	}
	t.Run("otlp", func(t *testing.T) {
		rec := newRecorder()
		oh, _ := newOTLPHandler(t, rec, nil, nil)
		w := postTo(t, oh, "extra_label=job=override&extra_label=env=prod", ContentTypeOTLPProto, otlpProto(t, otlpPayload(testNow)))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if s := rec.get(labels.FromStrings("__name__", "requests_total", "code", "200", "env", "prod", "instance", "i1", "job", "override")); s == nil {
			t.Fatalf("counter not stored with the extra labels; stored %v", rec.all())
		}
		for _, s := range rec.all() {
			if s.Labels.Get("env") != "prod" || s.Labels.Get("job") != "override" {
				t.Errorf("series %s without the extra labels", s.Labels)
			}
		}
		w = postTo(t, oh, "extra_label==x", ContentTypeOTLPProto, otlpProto(t, otlpPayload(testNow)))
		if w.Code != http.StatusBadRequest {
			t.Errorf("a malformed extra_label: %d %q, want 400", w.Code, w.Body)
		}
	})
}
