package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage"
	"github.com/shaledb/shale/storage/lsm"
)

// storageStatusPath is Shale's own endpoint describing the storage at work
// (docs/http-api.md); the UI's storage page shows it.
const storageStatusPath = "/api/v1/status/storage"

// S3 list prices in US dollars per 1,000 requests (Standard, us-east-1):
// PUT, COPY, POST and LIST; GET and all other reads (HEAD included);
// DELETE is free.
const (
	pricePutPer1000 = 0.005
	priceGetPer1000 = 0.0004
)

// requestKinds maps each object-store operation to its kind and price.
var requestKinds = []struct {
	op, kind string
	price    float64
}{
	{"put", "PUT", pricePutPer1000},
	{"list", "LIST", pricePutPer1000},
	{"get", "GET", priceGetPer1000},
	{"get_range", "GET (range)", priceGetPer1000},
	{"attributes", "HEAD", priceGetPer1000},
	{"delete", "DELETE", 0},
}

// rateWindow is the span the request rates are measured over, and
// rateSample how often the totals are read.
const (
	rateWindow = time.Minute
	rateSample = 5 * time.Second
)

// minutesPerMonth is an average month (365.25 days / 12).
const minutesPerMonth = 365.25 * 24 * 60 / 12

type opTotals struct {
	at     time.Time
	counts map[string]float64
}

// requestRates samples the object-store operation counters of a registry
// and measures their rate over the last rateWindow.
type requestRates struct {
	gather prometheus.Gatherer
	bucket string

	mu      sync.Mutex
	samples []opTotals // oldest first, spanning up to rateWindow
}

// read returns the operations so far of the bucket, by operation.
func (r *requestRates) read() (map[string]float64, error) {
	mfs, err := r.gather.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "shale_objstore_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var bucket, op string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "bucket":
					bucket = l.GetValue()
				case "operation":
					op = l.GetValue()
				}
			}
			if bucket == r.bucket {
				out[op] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

func (r *requestRates) sample(now time.Time) (opTotals, error) {
	counts, err := r.read()
	if err != nil {
		return opTotals{}, err
	}
	cur := opTotals{at: now, counts: counts}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, cur)
	// Keep the newest sample at least rateWindow old, and those after it.
	i := 0
	for i+1 < len(r.samples) && now.Sub(r.samples[i+1].at) >= rateWindow {
		i++
	}
	r.samples = r.samples[i:]
	return cur, nil
}

// run samples every rateSample until ctx ends.
func (r *requestRates) run(ctx context.Context, logger *slog.Logger) {
	t := time.NewTicker(rateSample)
	defer t.Stop()
	for {
		if _, err := r.sample(time.Now()); err != nil {
			logger.Warn("storage status: reading the object-store counters", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rates returns the totals now and the per-minute rates since the oldest
// sample kept, and the span they were measured over.
func (r *requestRates) rates(now time.Time) (totals, perMinute map[string]float64, span time.Duration, err error) {
	r.mu.Lock()
	var base opTotals
	if len(r.samples) > 0 {
		base = r.samples[0]
	}
	r.mu.Unlock()
	cur, err := r.read()
	if err != nil {
		return nil, nil, 0, err
	}
	perMinute = map[string]float64{}
	span = now.Sub(base.at)
	if base.counts == nil || span <= 0 {
		return cur, perMinute, 0, nil
	}
	for op, n := range cur {
		perMinute[op] = (n - base.counts[op]) / span.Minutes()
	}
	return cur, perMinute, span, nil
}

// storageStatus answers GET /api/v1/status/storage.
type storageStatus struct {
	db          *storage.DB
	mode, where string
	cache       *cache.Tiered
	cacheOpts   cache.Options
	rates       *requestRates
}

type tableJSON struct {
	ID      string `json:"id"`
	Bytes   int64  `json:"bytes"`
	Entries uint64 `json:"entries"`
}

type levelJSON struct {
	Name   string      `json:"name"`
	Tables []tableJSON `json:"tables"`
	Bytes  int64       `json:"bytes"`
}

type partitionJSON struct {
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	State  string `json:"state"`
	Series *int   `json:"series,omitempty"`
}

type kindJSON struct {
	Kind           string  `json:"kind"`
	Operation      string  `json:"operation"`
	Total          float64 `json:"total"`
	PerMinute      float64 `json:"perMinute"`
	PricePer1000   float64 `json:"pricePer1000USD"`
	MonthlyCostUSD float64 `json:"monthlyCostUSD"`
}

type tierJSON struct {
	Tier          string   `json:"tier"`
	Hits          uint64   `json:"hits"`
	Misses        uint64   `json:"misses"`
	HitRatio      *float64 `json:"hitRatio"`
	Bytes         int64    `json:"bytes"`
	CapacityBytes int64    `json:"capacityBytes"`
	Entries       int64    `json:"entries"`
}

type healthJSON struct {
	Failing     bool   `json:"failing"`
	Since       string `json:"since,omitempty"`
	LastError   string `json:"lastError,omitempty"`
	LastPersist string `json:"lastPersist,omitempty"`
}

type storageStatusJSON struct {
	Mode              string          `json:"mode"`
	ObjectStore       string          `json:"objectStore"`
	Manifest          uint64          `json:"manifest"`
	WriterEpoch       uint64          `json:"writerEpoch"`
	LastSeq           uint64          `json:"lastSeq"`
	Fenced            bool            `json:"fenced"`
	ReaderLastRefresh string          `json:"readerLastRefresh,omitempty"`
	ReaderLagSeconds  *float64        `json:"readerLagSeconds,omitempty"`
	Health            healthJSON      `json:"health"`
	Partitions        []partitionJSON `json:"partitions"`
	Levels            []levelJSON     `json:"levels"`
	RangeTombstones   int             `json:"rangeTombstones"`
	Memtable          struct {
		Bytes     int64 `json:"bytes"`
		Entries   int64 `json:"entries"`
		Immutable int   `json:"immutable"`
	} `json:"memtable"`
	WAL struct {
		Enabled        bool   `json:"enabled"`
		LastWALID      uint64 `json:"lastWALID"`
		ReplayAfter    uint64 `json:"replayAfter"`
		PendingObjects int    `json:"pendingObjects"`
		PendingBytes   int64  `json:"pendingBytes"`
	} `json:"wal"`
	Compaction struct {
		Running bool   `json:"running"`
		Total   uint64 `json:"total"`
	} `json:"compaction"`
	Requests struct {
		WindowSeconds  float64    `json:"windowSeconds"`
		Kinds          []kindJSON `json:"kinds"`
		MonthlyCostUSD float64    `json:"monthlyCostUSD"`
	} `json:"requests"`
	Cache []tierJSON `json:"cache"`
}

// requestCosts prices the request rates by kind, and returns the monthly
// total they come to at those rates.
func requestCosts(totals, perMinute map[string]float64) ([]kindJSON, float64) {
	kinds := []kindJSON{}
	var sum float64
	for _, k := range requestKinds {
		j := kindJSON{Kind: k.kind, Operation: k.op, Total: totals[k.op], PerMinute: perMinute[k.op], PricePer1000: k.price}
		j.MonthlyCostUSD = j.PerMinute * minutesPerMonth / 1000 * k.price
		sum += j.MonthlyCostUSD
		kinds = append(kinds, j)
	}
	return kinds, sum
}

func tablesJSON(ts []lsm.TableStatus) []tableJSON {
	out := make([]tableJSON, len(ts))
	for i, t := range ts {
		out[i] = tableJSON{ID: t.ID, Bytes: t.Bytes, Entries: t.Entries}
	}
	return out
}

func tierOf(name string, t cache.TierStats, capacity int64) tierJSON {
	j := tierJSON{Tier: name, Hits: t.Hits, Misses: t.Misses, Bytes: t.Bytes, CapacityBytes: capacity, Entries: t.Entries}
	if n := t.Hits + t.Misses; n > 0 {
		r := float64(t.Hits) / float64(n)
		j.HitRatio = &r
	}
	return j
}

func (s *storageStatus) status(ctx context.Context, now time.Time) (*storageStatusJSON, error) {
	var out storageStatusJSON
	out.Mode, out.ObjectStore = s.mode, s.where
	st := s.db.LSMStatus()
	out.Manifest, out.WriterEpoch, out.LastSeq = st.Manifest, st.WriterEpoch, st.LastSeq
	if s.mode == "writer" {
		h := s.db.StoreHealth()
		out.Fenced = h.Fenced
		out.Health.Failing = h.Failing
		if h.Failing {
			out.Health.Since = h.Since.UTC().Format(time.RFC3339)
			out.Health.LastError = fmt.Sprintf("%s: %v", h.Op, h.Err)
		}
		if !h.LastPersist.IsZero() {
			out.Health.LastPersist = h.LastPersist.UTC().Format(time.RFC3339)
		}
	} else if !st.RefreshedAt.IsZero() {
		out.ReaderLastRefresh = st.RefreshedAt.UTC().Format(time.RFC3339Nano)
		lag := now.Sub(st.RefreshedAt).Seconds()
		out.ReaderLagSeconds = &lag
	}
	parts, err := s.db.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	out.Partitions = make([]partitionJSON, 0, len(parts))
	for _, p := range parts {
		j := partitionJSON{Start: p.Start, End: p.End}
		switch {
		case p.Head && !p.Closed:
			j.State = "open (in memory)"
		case p.Head:
			j.State = "closing"
		case p.Closed:
			j.State = "closed (in object store)"
		default:
			j.State = "being created"
		}
		if p.Series >= 0 {
			n := p.Series
			j.Series = &n
		}
		out.Partitions = append(out.Partitions, j)
	}
	l0 := levelJSON{Name: "L0", Tables: tablesJSON(st.L0)}
	for _, t := range st.L0 {
		l0.Bytes += t.Bytes
	}
	out.Levels = []levelJSON{l0}
	// Sorted runs are the levels below L0, newest (smallest) first.
	for i, r := range st.Runs {
		out.Levels = append(out.Levels, levelJSON{Name: fmt.Sprintf("run %d (L%d)", r.ID, i+1), Tables: tablesJSON(r.Tables), Bytes: r.Bytes})
	}
	out.RangeTombstones = st.RangeTombstones
	out.Memtable.Bytes, out.Memtable.Entries, out.Memtable.Immutable = st.MemtableBytes, st.MemtableEntries, st.Immutable
	out.WAL.Enabled = s.db.WALEnabled()
	out.WAL.LastWALID, out.WAL.ReplayAfter = st.LastWAL, st.ReplayAfter
	out.WAL.PendingObjects, out.WAL.PendingBytes = st.PendingWALObjects, st.PendingWALBytes
	out.Compaction.Running, out.Compaction.Total = st.Compacting, st.Compactions

	totals, perMinute, span, err := s.rates.rates(now)
	if err != nil {
		return nil, err
	}
	out.Requests.WindowSeconds = span.Seconds()
	out.Requests.Kinds, out.Requests.MonthlyCostUSD = requestCosts(totals, perMinute)
	cs := s.cache.Stats()
	out.Cache = []tierJSON{tierOf("memory", cs.Memory, s.cacheOpts.MemoryBytes)}
	if s.cacheOpts.DiskPath != "" {
		out.Cache = append(out.Cache, tierOf("disk", cs.Disk, s.cacheOpts.DiskBytes))
	}
	return &out, nil
}

func (s *storageStatus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	st, err := s.status(r.Context(), time.Now())
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "internal", "error": "storage status: " + err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": st})
}

// startStorageStatus returns the handler of GET /api/v1/status/storage and
// starts sampling the object-store counters of bucket (the label of
// shale_objstore_operations_total) until ctx ends.
func startStorageStatus(ctx context.Context, db *storage.DB, mode, where, bucket string, c *cache.Tiered, copts cache.Options, reg prometheus.Gatherer, logger *slog.Logger) *storageStatus {
	rates := &requestRates{gather: reg, bucket: bucket}
	go rates.run(ctx, logger)
	return &storageStatus{db: db, mode: mode, where: where, cache: c, cacheOpts: copts, rates: rates}
}
