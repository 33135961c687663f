package main

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRequestRatesAndCost(t *testing.T) {
	reg := prometheus.NewRegistry()
	ops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shale_objstore_operations_total"}, []string{"bucket", "operation"})
	reg.MustRegister(ops)
	ops.WithLabelValues("other", "put").Add(1e6) // another bucket: not counted
	ops.WithLabelValues("data", "put").Add(100)
	r := &requestRates{gather: reg, bucket: "data"}
	t0 := time.Unix(1000, 0)
	if _, err := r.sample(t0); err != nil {
		t.Fatal(err)
	}
	// 600 PUTs and 6,000 GETs in two minutes: 300 and 3,000 a minute.
	ops.WithLabelValues("data", "put").Add(600)
	ops.WithLabelValues("data", "get").Add(6000)
	for i := 1; i <= 24; i++ {
		if _, err := r.sample(t0.Add(time.Duration(i) * 5 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	kept, oldest := len(r.samples), r.samples[0].at
	r.mu.Unlock()
	if now := t0.Add(2 * time.Minute); now.Sub(oldest) != rateWindow || kept != 13 {
		t.Fatalf("kept %d samples from %v: want 13 spanning %v", kept, oldest, rateWindow)
	}
	// The counters moved only before the window: no rate.
	totals, perMinute, span, err := r.rates(t0.Add(2 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if totals["put"] != 700 || totals["get"] != 6000 || perMinute["put"] != 0 || span != time.Minute {
		t.Fatalf("totals %v, per minute %v over %v", totals, perMinute, span)
	}

	r = &requestRates{gather: reg, bucket: "data"}
	if _, err := r.sample(t0); err != nil {
		t.Fatal(err)
	}
	ops.WithLabelValues("data", "put").Add(300)
	ops.WithLabelValues("data", "list").Add(30)
	ops.WithLabelValues("data", "get_range").Add(3000)
	ops.WithLabelValues("data", "delete").Add(50)
	totals, perMinute, _, err = r.rates(t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if perMinute["put"] != 300 || perMinute["list"] != 30 || perMinute["get_range"] != 3000 || perMinute["delete"] != 50 {
		t.Fatalf("per minute %v", perMinute)
	}
	// 300 PUT + 30 LIST a minute at $0.005/1000, 3,000 GET a minute at
	// $0.0004/1000, DELETE free; 43,830 minutes in a month.
	kinds, cost := requestCosts(totals, perMinute)
	want := (330*0.005 + 3000*0.0004) / 1000 * 43830
	if math.Abs(cost-want) > 1e-6 {
		t.Fatalf("monthly cost %v, want %v", cost, want)
	}
	for _, k := range kinds {
		if k.Operation == "delete" && (k.MonthlyCostUSD != 0 || k.Total != 50) {
			t.Errorf("DELETE: %+v, want free", k)
		}
		if k.Operation == "put" && math.Abs(k.MonthlyCostUSD-300*0.005/1000*43830) > 1e-6 {
			t.Errorf("PUT: %+v", k)
		}
	}
}
