package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// loadConfig describes the remote-write load.
type loadConfig struct {
	Series      int           // active series (rounded up to whole targets)
	PerTarget   int           // series per target
	Batch       int           // series per request (rounded to whole targets)
	PerSeries   int           // samples of each series per request (consecutive scrapes, compressed time)
	Version     int           // remote write 1 or 2
	Interval    time.Duration // scrape interval in data time
	Start       int64         // first timestamp, ms (compressed time)
	End         int64         // last timestamp, ms (compressed time)
	RealTime    bool          // timestamps follow the wall clock, one step per Interval
	Churn       float64       // fraction of targets replaced every ChurnEvery of data time
	ChurnEvery  time.Duration // data-time period of churn
	Rate        float64       // samples/s; 0 sends as fast as the receiver accepts
	Duration    time.Duration // wall-clock limit of the ingest
	Concurrency int           // requests in flight
	Window      int           // most steps one sender may run ahead of the slowest
	Seed        uint64
	Progress    time.Duration // progress line period; 0 disables it
	Name        string        // system name on the progress line
}

// targets returns the number of targets and of targets per request.
func (c loadConfig) targets() (targets, perShard int) {
	targets = (c.Series + c.PerTarget - 1) / c.PerTarget
	perShard = max(1, c.Batch/c.PerTarget)
	return targets, perShard
}

// perSeries is the number of scrapes each request carries.
func (c loadConfig) perSeries() int {
	if c.RealTime {
		return 1
	}
	return max(1, c.PerSeries)
}

// reqRecord is one remote-write request as the sender saw it.
type reqRecord struct {
	done    time.Duration // since the start of the ingest, at completion
	latency time.Duration
	samples int32
	ok      bool
}

// loadResult is what an ingest run measured.
type loadResult struct {
	Samples       int64 // acknowledged with 2xx
	Requests      int64
	Failed        int64 // requests that never got a 2xx
	Retries       int64
	FirstError    string
	Elapsed       time.Duration
	ActiveSeries  int
	SeriesCreated int64
	LastTS        int64 // newest timestamp sent by every sender, ms
	FirstTS       int64
	records       []reqRecord
}

// shardState is one shard and the targets (with their generation) it holds.
type shardState struct {
	*shard
	targets []int
	gens    []int
}

// generator owns the shards, built once before the clock starts.
type generator struct {
	cfg    loadConfig
	fams   []family
	shards []*shardState
	series atomic.Int64 // series created, churn included
}

func newGenerator(cfg loadConfig) (*generator, error) {
	if cfg.PerTarget <= 0 || cfg.Series <= 0 {
		return nil, fmt.Errorf("series %d and series per target %d must be positive", cfg.Series, cfg.PerTarget)
	}
	g := &generator{cfg: cfg, fams: nodeFamilies(cfg.PerTarget)}
	targets, per := cfg.targets()
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for t0 := 0; t0 < targets; t0 += per {
		st := &shardState{}
		var defs []seriesDef
		for t := t0; t < min(targets, t0+per); t++ {
			st.targets = append(st.targets, t)
			st.gens = append(st.gens, 0)
			defs = append(defs, targetSeries(g.fams, t, 0)...)
		}
		sh, err := newShard(cfg.Version, cfg.perSeries(), defs, rng)
		if err != nil {
			return nil, err
		}
		st.shard = sh
		g.shards = append(g.shards, st)
		g.series.Add(int64(len(defs)))
	}
	return g, nil
}

// activeSeries is the number of series sent at every step.
func (g *generator) activeSeries() int {
	targets, _ := g.cfg.targets()
	return targets * g.cfg.PerTarget
}

// churn replaces each target of st with probability cfg.Churn and rebuilds
// the shard's payload when one changed.
func (g *generator) churn(st *shardState, rng *rand.Rand) error {
	changed := false
	for i := range st.targets {
		if rng.Float64() < g.cfg.Churn {
			st.gens[i]++
			changed = true
		}
	}
	if !changed {
		return nil
	}
	var defs []seriesDef
	for i, t := range st.targets {
		defs = append(defs, targetSeries(g.fams, t, st.gens[i])...)
	}
	sh, err := newShard(g.cfg.Version, g.cfg.perSeries(), defs, rng)
	if err != nil {
		return err
	}
	// Surviving series keep their values so counters do not reset.
	for i := range defs {
		if sameLabels(defs[i], st.series[i]) {
			sh.values[i] = st.values[i]
		}
	}
	created := 0
	for i := range defs {
		if !sameLabels(defs[i], st.series[i]) {
			created++
		}
	}
	g.series.Add(int64(created))
	st.shard = sh
	return nil
}

func sameLabels(a, b seriesDef) bool {
	if len(a.labels) != len(b.labels) {
		return false
	}
	for i := range a.labels {
		if a.labels[i].Name != b.labels[i].Name || a.labels[i].Value != b.labels[i].Value {
			return false
		}
	}
	return true
}

// stepGate lets a sender start a step only when every sender has finished
// the step Window before it, so no series falls far behind the others
// (Prometheus rejects samples more than an hour behind its newest).
type stepGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	done   []int // last finished step per sender
	window int
	closed bool
}

func newStepGate(senders, window int) *stepGate {
	g := &stepGate{done: make([]int, senders), window: window}
	for i := range g.done {
		g.done[i] = -1
	}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *stepGate) minDone() int {
	m := g.done[0]
	for _, d := range g.done[1:] {
		m = min(m, d)
	}
	return m
}

// wait blocks until step may start; it returns false once the gate is closed.
func (g *stepGate) wait(step int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.closed && g.minDone() < step-g.window {
		g.cond.Wait()
	}
	return !g.closed
}

func (g *stepGate) finish(sender, step int) {
	g.mu.Lock()
	g.done[sender] = step
	g.mu.Unlock()
	g.cond.Broadcast()
}

// leave marks a sender as finished with every step.
func (g *stepGate) leave(sender int) { g.finish(sender, 1<<30) }

func (g *stepGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cond.Broadcast()
}

// run sends the load to url and measures it.
func (g *generator) run(ctx context.Context, url string) (*loadResult, error) {
	cfg := g.cfg
	conc := max(1, min(cfg.Concurrency, len(g.shards)))
	client := &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: conc,
			MaxConnsPerHost:     conc,
			DisableCompression:  true,
		},
	}
	defer client.CloseIdleConnections()

	res := &loadResult{ActiveSeries: g.activeSeries(), FirstTS: cfg.Start}
	var (
		samples, requests, failed, retries atomic.Int64
		stop                               atomic.Bool
		scheduled                          atomic.Int64
		firstErr                           sync.Once
		mu                                 sync.Mutex
		lastTS                             = make([]int64, conc)
	)
	gate := newStepGate(conc, max(1, cfg.Window))
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	recs := make([][]reqRecord, conc)
	if cfg.RealTime {
		res.FirstTS = start.UnixMilli()
	}

	progDone := make(chan struct{})
	var progWG sync.WaitGroup
	if cfg.Progress > 0 {
		progWG.Add(1)
		go func() {
			defer progWG.Done()
			tk := time.NewTicker(cfg.Progress)
			defer tk.Stop()
			var prev int64
			prevT := start
			for {
				select {
				case <-progDone:
					return
				case now := <-tk.C:
					s := samples.Load()
					mu.Lock()
					lt := lastTS[0]
					for _, v := range lastTS {
						lt = min(lt, v)
					}
					mu.Unlock()
					fmt.Fprintf(os.Stderr, "[%s] %6.1fs  data %s  %s samples  %s/s  requests %d  failed %d  retries %d\n",
						cfg.Name, now.Sub(start).Seconds(), dataProgress(cfg, res.FirstTS, lt),
						si(float64(s)), si(float64(s-prev)/now.Sub(prevT).Seconds()),
						requests.Load(), failed.Load(), retries.Load())
					prev, prevT = s, now
				}
			}
		}()
	}

	var wg sync.WaitGroup
	errc := make(chan error, conc)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer gate.leave(w)
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)+2))
			var mine []*shardState
			for i := w; i < len(g.shards); i += conc {
				mine = append(mine, g.shards[i])
			}
			per := cfg.perSeries()
			churnSteps := 0
			if cfg.Churn > 0 && cfg.ChurnEvery > 0 {
				churnSteps = max(1, int(cfg.ChurnEvery/cfg.Interval)/per)
			}
			for step := 0; ; step++ {
				var ts int64
				if cfg.RealTime {
					due := start.Add(time.Duration(step) * cfg.Interval)
					if due.After(deadline) {
						return
					}
					if d := time.Until(due); d > 0 && !sleepCtx(ctx, d) {
						return
					}
					ts = due.UnixMilli()
				} else {
					ts = cfg.Start + int64(step*per)*cfg.Interval.Milliseconds()
					if ts+int64(per-1)*cfg.Interval.Milliseconds() > cfg.End {
						return
					}
				}
				if !gate.wait(step) {
					return
				}
				for _, st := range mine {
					if stop.Load() || ctx.Err() != nil {
						return
					}
					if churnSteps > 0 && step > 0 && step%churnSteps == 0 {
						if err := g.churn(st, rng); err != nil {
							errc <- err
							stop.Store(true)
							return
						}
					}
					if step > 0 {
						st.advance(rng)
					}
					body, err := st.payload(ts, cfg.Interval, rng)
					if err != nil {
						errc <- err
						stop.Store(true)
						return
					}
					n := int64(len(st.values) * per)
					if cfg.Rate > 0 {
						due := start.Add(time.Duration(float64(scheduled.Add(n)) / cfg.Rate * float64(time.Second)))
						if d := time.Until(due); d > 0 {
							time.Sleep(d)
						}
					}
					t0 := time.Now()
					ok, attempts, msg := send(client, url, cfg.Version, body)
					lat := time.Since(t0)
					requests.Add(1)
					retries.Add(int64(attempts - 1))
					if ok {
						samples.Add(n)
					} else {
						failed.Add(1)
						firstErr.Do(func() { res.FirstError = msg })
					}
					recs[w] = append(recs[w], reqRecord{done: time.Since(start), latency: lat, samples: int32(n), ok: ok})
					if !cfg.RealTime && time.Now().After(deadline) {
						stop.Store(true)
					}
				}
				mu.Lock()
				lastTS[w] = ts + int64(per-1)*cfg.Interval.Milliseconds()
				mu.Unlock()
				gate.finish(w, step)
			}
		}()
	}
	wg.Wait()
	gate.close()
	res.Elapsed = time.Since(start)
	close(progDone)
	progWG.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	res.Samples, res.Requests, res.Failed, res.Retries = samples.Load(), requests.Load(), failed.Load(), retries.Load()
	res.SeriesCreated = g.series.Load()
	res.LastTS = lastTS[0]
	for _, v := range lastTS {
		res.LastTS = min(res.LastTS, v)
	}
	for _, r := range recs {
		res.records = append(res.records, r...)
	}
	return res, nil
}

// send posts one payload, retrying what a remote-write sender retries (5xx,
// 429, connection errors) a few times. It returns whether it got a 2xx, the
// attempts made and the last error.
func send(client *http.Client, url string, version int, body []byte) (bool, int, string) {
	var msg string
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return false, attempt, err.Error()
		}
		if version == versionOTLP {
			req.Header.Set("Content-Type", "application/x-protobuf")
		} else {
			req.Header.Set("Content-Encoding", "snappy")
			req.Header.Set("Content-Type", contentType(version))
			req.Header.Set("X-Prometheus-Remote-Write-Version", protoVersionHeader(version))
		}
		req.Header.Set("User-Agent", "shale-tsdb-bench")
		resp, err := client.Do(req)
		retry := true
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return true, attempt, ""
			}
			msg = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
			retry = resp.StatusCode/100 == 5 || resp.StatusCode == http.StatusTooManyRequests
		} else {
			msg = err.Error()
		}
		if !retry || attempt >= 5 {
			return false, attempt, msg
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// dataProgress says how far through its data-time range the load is.
func dataProgress(cfg loadConfig, first, last int64) string {
	if last == 0 {
		return "-"
	}
	if cfg.RealTime {
		return (time.Duration(last-first) * time.Millisecond).String()
	}
	return fmt.Sprintf("%s of %s", (time.Duration(last-first) * time.Millisecond).Truncate(time.Minute),
		time.Duration(cfg.End-cfg.Start)*time.Millisecond)
}

// nullReceiver is an HTTP server that reads and drops every request: the
// peer that measures the generator alone.
func nullReceiver() (url string, stop func(), err error) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	l, err := listenLoopback()
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String() + "/api/v1/write", func() { _ = srv.Close() }, nil
}

// sleepCtx waits d, or less when ctx ends first; it reports whether all of d
// passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
