package storage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
)

// TestMetadataLasts: metric metadata survives a restart, a reader serves the
// writer's, a change wins, and retention drops it with its partitions.
func TestMetadataLasts(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.Retention = 24 * time.Hour
	db, b := openMemDB(t, opts)
	hour := int64(time.Hour / time.Millisecond)
	put := func(db *DB, t0 int64, name string, md metadata.Metadata) {
		t.Helper()
		app := db.Appender(ctx)
		lset := labels.FromStrings("__name__", name)
		if _, err := app.Append(0, lset, t0, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := app.UpdateMetadata(0, lset, md); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served.", Unit: "requests"}
	gauge := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature."}
	put(db, 10*hour, "old_total", counter)
	put(db, 10*hour, "temp", gauge)
	gauge2 := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature in kelvin.", Unit: "kelvin"}
	put(db, 10*hour+1, "temp", gauge2)
	expect := func(db *DB, when string, want map[string]metadata.Metadata) {
		t.Helper()
		got, err := db.MetricMetadata(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", when, got, want)
		}
		for f, w := range want {
			if len(got[f]) != 1 || got[f][0] != w {
				t.Fatalf("%s: %s = %v, want %v", when, f, got[f], w)
			}
		}
	}
	want := map[string]metadata.Metadata{"old_total": counter, "temp": gauge2}
	expect(db, "written", want)

	r := openTestReader(t, b, opts, nil)
	defer r.Close()
	expect(r, "a reader", want)

	db = reopen(t, db, b, opts)
	defer db.Close()
	expect(db, "after a restart", want)

	// A day and more later only temp is sent again: old_total's partitions
	// go with retention, and its metadata with them.
	put(db, 40*hour, "temp", gauge2)
	if err := db.flushHead(ctx, closeOld); err != nil {
		t.Fatal(err)
	}
	if err := db.applyRetention(ctx); err != nil {
		t.Fatal(err)
	}
	expect(db, "after retention", map[string]metadata.Metadata{"temp": gauge2})
}

// TestMetadataCodec: values round-trip, and garbage is an error.
func TestMetadataCodec(t *testing.T) {
	md := metadata.Metadata{Type: model.MetricTypeHistogram, Unit: "seconds", Help: "Latency; with ünïcode."}
	got, err := decodeMetadata(encodeMetadata(nil, md))
	if err != nil || got != md {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {2}, {1}, {1, 5, 'a'}, append(encodeMetadata(nil, md), 0)} {
		if _, err := decodeMetadata(bad); err == nil {
			t.Errorf("decodeMetadata(%x) accepted garbage", bad)
		}
	}
}

// TestEmptyMetadataKeepsWhatWasSaid: metadata with nothing in it (the type
// unknown or unset, no help, no unit), which a remote-write 2.0 sender that
// sends no metadata puts on every series, records nothing and leaves what
// another sender said, through either appender.
func TestEmptyMetadataKeepsWhatWasSaid(t *testing.T) {
	ctx := context.Background()
	db, _ := openMemDB(t, DefaultOptions())
	defer db.Close()
	now := time.Now().UnixMilli()
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served."}
	for i, md := range []metadata.Metadata{counter, {Type: model.MetricTypeUnknown}, {}} {
		lset := labels.FromStrings("__name__", "requests_total", "i", "a")
		ia := db.IngestAppender(ctx)
		if _, err := ia.UpdateMetadata(0, lset, md); err != nil {
			t.Fatal(err)
		}
		if _, err := ia.Append(0, lset, 0, now+int64(i), 1); err != nil {
			t.Fatal(err)
		}
		if err := ia.Commit(); err != nil {
			t.Fatal(err)
		}
		app := db.Appender(ctx)
		if _, err := app.UpdateMetadata(0, lset, md); err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(0, labels.FromStrings("__name__", "requests_total", "i", "b"), now+int64(i), 1); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.MetricMetadata(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got["requests_total"]) != 1 || got["requests_total"][0] != counter {
		t.Fatalf("metadata %v, want requests_total: %v", got, counter)
	}

	// Metadata of the unknown type that says something is kept.
	unknown := metadata.Metadata{Type: model.MetricTypeUnknown, Help: "Untyped."}
	app := db.Appender(ctx)
	lset := labels.FromStrings("__name__", "untyped")
	if _, err := app.UpdateMetadata(0, lset, unknown); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Append(0, lset, now, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := db.MetricMetadata(ctx, "untyped"); err != nil || len(got["untyped"]) != 1 || got["untyped"][0] != unknown {
		t.Fatalf("metadata of untyped: %v, %v", got, err)
	}
}

// TestMetadataOfOneRequest: metadata sent with every series of a request,
// as remote write 2.0 sends it, is stored once a family, and where a family's
// metadata changes within the request the later wins, whatever came between.
func TestMetadataOfOneRequest(t *testing.T) {
	ctx := context.Background()
	db, _ := openMemDB(t, DefaultOptions())
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "Requests served.", Unit: "requests"}
	hist := metadata.Metadata{Type: model.MetricTypeHistogram, Help: "Latency."}
	gauge := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature."}
	gauge2 := metadata.Metadata{Type: model.MetricTypeGauge, Help: "Temperature in kelvin.", Unit: "kelvin"}
	sent := []struct {
		lset labels.Labels
		md   metadata.Metadata
	}{
		{labels.FromStrings("__name__", "temp", "i", "1"), gauge},
		{labels.FromStrings("__name__", "requests_total", "i", "1"), counter},
		{labels.FromStrings("__name__", "requests_total", "i", "2"), counter},
		{labels.FromStrings("__name__", "latency_bucket", "le", "1"), hist},
		{labels.FromStrings("__name__", "latency_sum"), hist},
		{labels.FromStrings("__name__", "temp", "i", "2"), gauge2},
		{labels.FromStrings("__name__", "requests_total", "i", "3"), counter},
		{labels.FromStrings("__name__", "temp", "i", "3"), gauge2},
	}
	app := db.Appender(ctx)
	now := time.Now().UnixMilli()
	for _, s := range sent {
		if _, err := app.Append(0, s.lset, now, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := app.UpdateMetadata(0, s.lset, s.md); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(app.(*appenderV1).a.meta); n != 3 {
		t.Errorf("%d metadata entries queued for 3 families", n)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := db.MetricMetadata(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]metadata.Metadata{"temp": gauge2, "requests_total": counter, "latency": hist}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for f, w := range want {
		if len(got[f]) != 1 || got[f][0] != w {
			t.Errorf("%s = %v, want %v", f, got[f], w)
		}
	}
}
