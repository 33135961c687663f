package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/shaledb/shale/internal/e2e"
)

func storageStatusOf(t *testing.T, base string) storageStatusJSON {
	t.Helper()
	resp, err := http.Get(base + storageStatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string            `json:"status"`
		Data   storageStatusJSON `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" || resp.StatusCode != 200 {
		t.Fatalf("storage status: %d %s %v", resp.StatusCode, r.Status, err)
	}
	return r.Data
}

// TestStorageStatusWriterAndReader checks /api/v1/status/storage on a
// writer whose head has been flushed to tables, and on a reader of the
// same folder, which sees the same manifest and says how fresh it is.
func TestStorageStatusWriterAndReader(t *testing.T) {
	skipEndToEnd(t)
	dir := t.TempDir()
	w := startShale(t, "--storage.path="+dir, "--storage.head-flush-interval=1s")
	defer w.stop(t)
	end := time.Now().Truncate(time.Minute)
	writeUIData(t, w.url, "ui_test_temperature", 5, end, time.Hour)
	var ws storageStatusJSON
	e2e.Eventually(t, 30*time.Second, func() bool {
		ws = storageStatusOf(t, w.url)
		tables := 0
		for _, l := range ws.Levels {
			tables += len(l.Tables)
		}
		return tables > 0
	}, "the writer's head to be flushed to tables")
	if ws.Mode != "writer" || ws.WriterEpoch != 1 || ws.Fenced || ws.Health.Failing || ws.Health.LastPersist == "" || !ws.WAL.Enabled {
		t.Fatalf("writer status: %+v", ws)
	}
	var series int
	for _, p := range ws.Partitions {
		if p.End-p.Start != (2*time.Hour).Milliseconds() || p.Series == nil {
			t.Fatalf("partition %+v: want 2 h, in memory", p)
		}
		series += *p.Series
	}
	if series < 5 || len(ws.Partitions) < 1 {
		t.Fatalf("partitions %+v hold %d series, want at least the 5 written", ws.Partitions, series)
	}
	var put float64
	for _, k := range ws.Requests.Kinds {
		if k.Operation == "put" {
			put = k.Total
		}
	}
	if put == 0 || len(ws.Cache) != 1 || ws.Cache[0].Tier != "memory" || ws.Cache[0].CapacityBytes != 512<<20 {
		t.Fatalf("requests %+v, cache %+v", ws.Requests, ws.Cache)
	}

	r := startShale(t, "--storage.path="+dir, "--mode=reader", "--storage.reader.poll-interval=200ms")
	defer r.stop(t)
	e2e.Eventually(t, 30*time.Second, func() bool {
		rs := storageStatusOf(t, r.url)
		cur := storageStatusOf(t, w.url)
		return rs.Mode == "reader" && rs.Manifest == cur.Manifest && rs.WriterEpoch == cur.WriterEpoch &&
			rs.ReaderLastRefresh != "" && rs.ReaderLagSeconds != nil && *rs.ReaderLagSeconds < 2 && len(rs.Partitions) == len(cur.Partitions)
	}, "the reader to follow the writer's manifest and say when it last did")
}
