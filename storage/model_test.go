package storage

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"

	"github.com/shaledb/shale/storage/objstore"
)

// model is the naive reference: every accepted sample of every series.
type refModel map[string]map[int64]float64

func (m refModel) add(lset labels.Labels, t int64, v float64) {
	k := lset.String()
	if m[k] == nil {
		m[k] = map[int64]float64{}
	}
	m[k][t] = v
}

func (m refModel) query(all []labels.Labels, mint, maxt int64, ms []*labels.Matcher) map[string][]tsample {
	out := map[string][]tsample{}
	for _, lset := range all {
		ok := true
		for _, mt := range ms {
			if !mt.Matches(lset.Get(mt.Name)) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		var ss []tsample
		for t, v := range m[lset.String()] {
			if t >= mint && t <= maxt {
				ss = append(ss, tsample{t, v})
			}
		}
		if len(ss) == 0 {
			continue
		}
		sort.Slice(ss, func(i, j int) bool { return ss[i].t < ss[j].t })
		out[lset.String()] = ss
	}
	return out
}

func randomMatchers(r *rand.Rand) []*labels.Matcher {
	pick := []func() *labels.Matcher{
		func() *labels.Matcher {
			return labels.MustNewMatcher(labels.MatchEqual, "job", fmt.Sprintf("j%d", r.Intn(3)))
		},
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotEqual, "job", "j1") },
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchRegexp, "instance", "i[0-2]") },
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotRegexp, "instance", "i1|i3") },
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchEqual, "zone", "") },
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchNotEqual, "zone", "") },
		func() *labels.Matcher { return labels.MustNewMatcher(labels.MatchRegexp, "__name__", "m.+") },
	}
	n := 1 + r.Intn(3)
	ms := make([]*labels.Matcher, 0, n)
	for range n {
		ms = append(ms, pick[r.Intn(len(pick))]())
	}
	return ms
}

// TestModel drives the engine with random appends (in order, out of order,
// duplicates, stale markers), flushes, partition closes and restarts, and
// compares every query with the naive model.
func TestModel(t *testing.T) {
	for _, wal := range []bool{true, false} {
		for seed := int64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("wal=%v/seed=%d", wal, seed), func(t *testing.T) {
				runModel(t, seed, wal)
			})
		}
	}
}

func runModel(t *testing.T, seed int64, wal bool) {
	r := rand.New(rand.NewSource(seed))
	opts := DefaultOptions()
	opts.WAL = wal
	opts.PartitionDuration = 10 * time.Minute
	opts.OutOfOrderWindow = 3 * time.Minute
	opts.Retention = 0
	b := objstore.NewMemoryBucket()
	db := openTestDB(t, b, opts)
	defer func() { _ = db.Close() }()

	var all []labels.Labels
	for i := range 24 {
		lb := labels.NewScratchBuilder(4)
		lb.Add("__name__", fmt.Sprintf("m%d", i%2))
		lb.Add("instance", fmt.Sprintf("i%d", i%4))
		lb.Add("job", fmt.Sprintf("j%d", i%3))
		if i%5 == 0 {
			lb.Add("zone", "z")
		}
		lb.Sort()
		all = append(all, lb.Labels())
	}
	ref := refModel{}
	now := int64(1_700_000_000_000)
	stale := math.Float64frombits(value.StaleNaN)
	ctx := context.Background()

	for step := 0; step < 200; step++ {
		switch op := r.Intn(20); {
		case op < 12: // append a batch
			app := db.Appender(ctx)
			type acc struct {
				lset labels.Labels
				t    int64
				v    float64
			}
			var accepted []acc
			for range 1 + r.Intn(30) {
				lset := all[r.Intn(len(all))]
				ts := now - int64(r.Intn(240_000)) // up to 4 min back: some too old
				if r.Intn(3) == 0 {
					ts = now
				}
				v := float64(r.Intn(100))
				if r.Intn(20) == 0 {
					v = stale
				}
				if _, err := app.Append(0, lset, ts, v); err == nil {
					accepted = append(accepted, acc{lset, ts, v})
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatalf("step %d: commit: %v", step, err)
			}
			for _, a := range accepted {
				if a.t == traceT {
					t.Logf("step %d: %s t=%d v=%v", step, a.lset, a.t, a.v)
				}
				ref.add(a.lset, a.t, a.v)
			}
			now += int64(r.Intn(60_000))
		case op < 14:
			if traceT != 0 {
				t.Logf("step %d flush", step)
			}
			if err := db.Flush(ctx); err != nil {
				t.Fatalf("step %d: flush: %v", step, err)
			}
		case op < 16:
			if traceT != 0 {
				t.Logf("step %d flush+close", step)
			}
			if err := db.flushHead(ctx, closeOld); err != nil {
				t.Fatalf("step %d: flush and close: %v", step, err)
			}
		case op < 17:
			if traceT != 0 {
				t.Logf("step %d restart", step)
			}
			if err := db.Close(); err != nil {
				t.Fatalf("step %d: close: %v", step, err)
			}
			db = openTestDB(t, b, opts)
		default:
			ms := randomMatchers(r)
			mint := now - int64(r.Intn(3_600_000))
			maxt := mint + int64(r.Intn(3_600_000))
			if r.Intn(4) == 0 {
				mint, maxt = math.MinInt64, math.MaxInt64
			}
			got := queryFloats(t, db, mint, maxt, ms...)
			want := ref.query(all, mint, maxt, ms)
			compareResults(t, fmt.Sprintf("step %d query %v [%d,%d]", step, ms, mint, maxt), got, want)
		}
	}
	got := queryFloats(t, db, math.MinInt64, math.MaxInt64, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	compareResults(t, "final", got, ref.query(all, math.MinInt64, math.MaxInt64, nil))
}

func compareResults(t *testing.T, what string, got, want map[string][]tsample) {
	t.Helper()
	for k, w := range want {
		if !sameSamples(got[k], w) {
			t.Fatalf("%s: series %s:\n got  %v\n want %v", what, k, got[k], w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && len(g) > 0 {
			t.Fatalf("%s: unexpected series %s with %v", what, k, g)
		}
	}
}

// traceT, when not zero, logs every operation that touches that timestamp.
var traceT int64
