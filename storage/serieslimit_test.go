package storage

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
)

// TestMaxHeadSeries: with Options.MaxHeadSeries, a partition that holds that
// many series refuses a sample of a new one as bad data (series_limit) and
// takes samples of the series it holds; the next partition has room of its
// own, and the limit holds across a restart, where the series come back from
// the store.
func TestMaxHeadSeries(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.MaxHeadSeries = 3
	db, b := openMemDB(t, opts)
	part := opts.PartitionDuration.Milliseconds()
	t0 := (time.Now().UnixMilli()/part)*part - part // a whole partition, ended
	series := func(i int) labels.Labels {
		return labels.FromStrings("__name__", "m", "i", string(rune('a'+i)))
	}
	appendAt := func(db *DB, ts int64, i int) error {
		app := db.Appender(ctx)
		_, err := app.Append(0, series(i), ts, float64(i))
		if cerr := app.Commit(); cerr != nil {
			t.Fatalf("commit: %v", cerr)
		}
		return err
	}
	for i := range 3 {
		if err := appendAt(db, t0+1000, i); err != nil {
			t.Fatalf("series %d of 3: %v", i, err)
		}
	}
	refused := func(db *DB, ts int64, i int) {
		t.Helper()
		err := appendAt(db, ts, i)
		var bd interface {
			BadData() bool
			RejectReason() string
		}
		if !errors.Is(err, ErrSeriesLimit) || !errors.As(err, &bd) || !bd.BadData() || bd.RejectReason() != "series_limit" {
			t.Fatalf("a new series beyond the limit: err %v, want ErrSeriesLimit, bad data, series_limit", err)
		}
	}
	refused(db, t0+2000, 3)
	for i := range 3 {
		if err := appendAt(db, t0+2000, i); err != nil {
			t.Fatalf("a held series refused at the limit: %v", err)
		}
	}
	if got := testutil.ToFloat64(db.metrics.rejected.WithLabelValues("series_limit")); got != 1 {
		t.Fatalf("series_limit rejections counted %v, want 1", got)
	}
	// The next partition counts its own series.
	if err := appendAt(db, t0+part+1000, 3); err != nil {
		t.Fatalf("a new series in the next partition: %v", err)
	}
	db2 := reopen(t, db, b, opts)
	defer db2.Close()
	refused(db2, t0+3000, 4)
	if err := appendAt(db2, t0+3000, 1); err != nil {
		t.Fatalf("a held series refused after a restart: %v", err)
	}
	q, err := db2.Querier(t0, t0+part)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(ctx, true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	var got []string
	for ss.Next() {
		got = append(got, ss.At().Labels().Get("i"))
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("first partition holds series %v, want %v", got, want)
	}
}

// TestMaxHeadSeriesBoundsMetadata: metadata of metric families, which remote
// write 1.0 sends apart from samples, is kept for at most
// Options.MaxHeadSeries families; a known family's metadata still changes.
func TestMaxHeadSeriesBoundsMetadata(t *testing.T) {
	ctx := context.Background()
	opts := DefaultOptions()
	opts.MaxHeadSeries = 2
	db, _ := openMemDB(t, opts)
	put := func(family, help string) {
		t.Helper()
		ia := db.IngestAppender(ctx)
		md := metadata.Metadata{Type: model.MetricTypeGauge, Help: help}
		if _, err := ia.UpdateMetadata(0, labels.FromStrings("__name__", family), md); err != nil {
			t.Fatal(err)
		}
		if err := ia.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		put("family_"+strconv.Itoa(i), "first")
	}
	put("family_0", "second")
	got, err := db.MetricMetadata(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got["family_0"]) != 1 || got["family_0"][0].Help != "second" || len(got["family_1"]) != 1 {
		t.Fatalf("metadata %v, want family_0 (changed) and family_1 only", got)
	}
	if n := testutil.ToFloat64(db.metrics.metadataRefused); n != 3 {
		t.Fatalf("metadata refused %v times, want 3", n)
	}
}
