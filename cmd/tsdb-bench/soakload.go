package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// The soak's load is deterministic per (series, timestamp): soakValue
// computes any sample's value from the series' index and the step, so the
// harness keeps only which (shard, step) requests were sent and
// acknowledged, a bit each, and recomputes every value at read-back. Two
// hours of 10k series in 20 requests per 15 s step take 2 × 20 × 480 bits.

// soakValue is the value of series (its global index) at step of its
// shard, in the kind's integer unit made a float as valueOf does: counters
// grow by 0..14.99 per step (never decrease), gauges wander over 0..20000,
// constants stay, bucket counters grow by 0..19.
func soakValue(k kind, series int, step int64, seed uint64) float64 {
	base := splitmix64(seed ^ uint64(series)*0x9e3779b97f4a7c15)
	h := splitmix64(base ^ uint64(step)*0xbf58476d1ce4e5b9)
	var u int64
	switch k {
	case kindConst:
		u = int64(base%(1<<20)) * 4096
	case kindCounter:
		u = int64(base%1_000_000) + step*1500 + int64(h%1500)
	case kindGauge:
		u = int64(h % 2_000_000)
	case kindBucket:
		u = int64(base%10_000) + step*20 + int64(h%20)
	}
	return valueOf(k, u)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// bitset is a growable set of small non-negative integers.
type bitset []uint64

func (b *bitset) set(i int) {
	for len(*b) <= i/64 {
		*b = append(*b, 0)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

func (b bitset) has(i int) bool { return i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0 }

// bookShard is one shard's part of the ackBook.
type bookShard struct {
	first, n  int      // global index of its first series; its series count
	offset    int64    // ms after the step's boundary at which this shard's samples lie
	instances []string // instance label values of its targets
	sent      bitset   // steps whose request was sent at least once
	acked     bitset   // steps whose request got a 2xx
}

// ackBook records, per shard and step, whether the request was sent and
// acknowledged. Safe for concurrent use.
type ackBook struct {
	t0       int64 // ms, the boundary of step 0
	interval int64 // ms
	mu       sync.Mutex
	shards   []bookShard
}

// ts is the timestamp of the samples of shard at step.
func (b *ackBook) ts(shard int, step int64) int64 {
	return b.t0 + step*b.interval + b.shards[shard].offset
}

// step returns the step of a sample of shard at ts, and false when no step
// of the shard has that timestamp.
func (b *ackBook) step(shard int, ts int64) (int64, bool) {
	d := ts - b.t0 - b.shards[shard].offset
	if d < 0 || d%b.interval != 0 {
		return 0, false
	}
	return d / b.interval, true
}

func (b *ackBook) markSent(shard int, step int64) {
	b.mu.Lock()
	b.shards[shard].sent.set(int(step))
	b.mu.Unlock()
}

func (b *ackBook) markAcked(shard int, step int64) {
	b.mu.Lock()
	b.shards[shard].acked.set(int(step))
	b.mu.Unlock()
}

// totals returns the requests sent and acknowledged and the samples
// acknowledged.
func (b *ackBook) totals() (sent, acked, ackedSamples int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.shards {
		for i := range len(s.sent) * 64 {
			if s.sent.has(i) {
				sent++
			}
			if s.acked.has(i) {
				acked++
				ackedSamples += int64(s.n)
			}
		}
	}
	return sent, acked, ackedSamples
}

// maxStep is one past the highest step sent by any shard.
func (b *ackBook) maxStep() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var m int64
	for _, s := range b.shards {
		for i := len(s.sent)*64 - 1; i >= 0; i-- {
			if s.sent.has(i) {
				m = max(m, int64(i)+1)
				break
			}
		}
	}
	return m
}

// soakSeries is what the read-back needs of the generated series.
type soakSeries struct {
	kinds []kind           // by global index
	index map[string]int32 // labelsKey -> global index
	names []string         // by global index: a printable name for reports
	seed  uint64
}

// labelsKey is a canonical string of a label set: sorted names, name=value
// pairs separated by 0xff.
func labelsKey(names, values []string) string {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	var sb strings.Builder
	for _, i := range idx {
		sb.WriteString(names[i])
		sb.WriteByte('=')
		sb.WriteString(values[i])
		sb.WriteByte(0xff)
	}
	return sb.String()
}

func promLabelsKey(lbs []prompb.Label) string {
	n := make([]string, len(lbs))
	v := make([]string, len(lbs))
	for i, l := range lbs {
		n[i], v[i] = l.Name, l.Value
	}
	return labelsKey(n, v)
}

func seriesName(lbs []prompb.Label) string {
	var sb strings.Builder
	var rest []string
	for _, l := range lbs {
		if l.Name == "__name__" {
			sb.WriteString(l.Value)
			continue
		}
		rest = append(rest, fmt.Sprintf("%s=%q", l.Name, l.Value))
	}
	sb.WriteString("{" + strings.Join(rest, ",") + "}")
	return sb.String()
}

// newSoakBook lays out the generator's shards: global series indexes,
// timestamp offsets spread over the interval (targets are scraped at
// different moments, which also spreads the requests), and the lookup the
// read-back needs.
func newSoakBook(g *generator, t0 int64, interval time.Duration, seed uint64) (*ackBook, *soakSeries) {
	iv := interval.Milliseconds()
	b := &ackBook{t0: t0, interval: iv}
	ss := &soakSeries{index: map[string]int32{}, seed: seed}
	first := 0
	for i, st := range g.shards {
		bs := bookShard{first: first, n: len(st.series), offset: int64(i) * iv / int64(len(g.shards))}
		seen := map[string]bool{}
		for _, sd := range st.series {
			ss.index[promLabelsKey(sd.labels)] = int32(len(ss.kinds))
			ss.kinds = append(ss.kinds, sd.kind)
			ss.names = append(ss.names, seriesName(sd.labels))
			for _, l := range sd.labels {
				if l.Name == "instance" && !seen[l.Value] {
					seen[l.Value] = true
					bs.instances = append(bs.instances, l.Value)
				}
			}
		}
		b.shards = append(b.shards, bs)
		first += len(st.series)
	}
	return b, ss
}

// Answers to a remote write that were not HTTP answers.
const (
	statusRefused  = -1 // connection refused: no writer listening
	statusTimeout  = -2 // no answer within the client's timeout
	statusConnErr  = -3 // connection reset, EOF and other transport errors
	statusCanceled = -4 // the harness stopped the load
)

func statusText(code int) string {
	switch code {
	case statusRefused:
		return "connection refused"
	case statusTimeout:
		return "timeout"
	case statusConnErr:
		return "connection error"
	case statusCanceled:
		return "canceled at the end"
	}
	return fmt.Sprintf("HTTP %d", code)
}

// rwAttempt is one remote-write request attempt, 24 bytes; a 2 h soak
// makes some 10k to 100k of them.
type rwAttempt struct {
	at      time.Duration // since the soak started, at completion
	latency time.Duration
	status  int32 // HTTP status or one of the status* constants
	samples int32
}

// soakLoad sends the remote-write load of the soak: one goroutine per
// shard, one request per step, each retried as a remote-write sender does
// (5xx, 429 and connection errors, backoff 30 ms doubling to 5 s) until
// acknowledged, rejected with another 4xx, or older than giveUp.
type soakLoad struct {
	gen      *generator
	book     *ackBook
	series   *soakSeries
	url      string
	start    time.Time
	end      time.Time // no step is due after it
	interval time.Duration
	giveUp   time.Duration
	// dataOffset is data time less wall time (-data-offset).
	dataOffset time.Duration
	client     *http.Client
	// inFlight holds a token per request in flight, as a remote-write
	// sender's shards (max_shards) bound them; nil: no bound.
	inFlight chan struct{}

	mu       sync.Mutex
	attempts []rwAttempt
	ackTimes []float32 // ms from the first attempt to the 2xx, per acknowledged request
	gaveUp   int64
	rejected int64 // requests given up after a 4xx other than 429
}

func newSoakLoad(g *generator, book *ackBook, ss *soakSeries, url string, start, end time.Time, timeout, giveUp time.Duration) *soakLoad {
	return &soakLoad{
		gen: g, book: book, series: ss, url: url, start: start, end: end,
		interval: g.cfg.Interval, giveUp: giveUp,
		client: &http.Client{
			Timeout: timeout,
			Transport: &http.Transport{
				Proxy:               nil,
				MaxIdleConnsPerHost: len(g.shards),
				DisableCompression:  true,
			},
		},
	}
}

// limitInFlight bounds the requests in flight to n (none when n <= 0): a
// sender with a shard per request group would otherwise retry every
// group at once when the receiver falls behind, where Prometheus sends
// through at most max_shards queues.
func (l *soakLoad) limitInFlight(n int) {
	if n > 0 {
		l.inFlight = make(chan struct{}, n)
	}
}

// run sends until l.end or ctx ends and returns when every shard stopped.
func (l *soakLoad) run(ctx context.Context) {
	defer l.client.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range l.gen.shards {
		wg.Go(func() { l.runShard(ctx, i) })
	}
	wg.Wait()
}

func (l *soakLoad) runShard(ctx context.Context, si int) {
	st := l.gen.shards[si]
	bs := &l.book.shards[si]
	rng := rand.New(rand.NewPCG(1, uint64(si))) // unused with one sample per series
	for step := int64(0); ; step++ {
		ts := l.book.ts(si, step)
		due := time.UnixMilli(ts).Add(-l.dataOffset) // wall time
		if due.After(l.end) {
			return
		}
		if d := time.Until(due); d > 0 && !sleepCtx(ctx, d) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		for j := range st.values {
			st.values[j] = soakValue(st.kinds[j], bs.first+j, step, l.series.seed)
		}
		body, err := st.payload(ts, l.interval, rng)
		if err != nil { // runSoak checks the time range first
			fmt.Fprintf(os.Stderr, "tsdb-bench: soak: shard %d stops sending: %v\n", si, err)
			return
		}
		body = bytes.Clone(body) // the transport may still hold the previous one
		l.book.markSent(si, step)
		if l.sendUntilAcked(ctx, body, len(st.values), due) {
			l.book.markAcked(si, step)
		}
	}
}

// sendUntilAcked posts body until a 2xx, a rejection, ctx's end or giveUp
// after due, recording every attempt; it reports whether a 2xx came.
func (l *soakLoad) sendUntilAcked(ctx context.Context, body []byte, samples int, due time.Time) bool {
	backoff := 30 * time.Millisecond
	first := time.Now()
	for {
		if l.inFlight != nil {
			select {
			case l.inFlight <- struct{}{}:
			case <-ctx.Done():
				return false
			}
		}
		t0 := time.Now()
		code := l.post(ctx, body)
		done := time.Now()
		if l.inFlight != nil {
			<-l.inFlight
		}
		if code == statusCanceled {
			return false
		}
		l.mu.Lock()
		l.attempts = append(l.attempts, rwAttempt{at: done.Sub(l.start), latency: done.Sub(t0), status: int32(code), samples: int32(samples)})
		if code/100 == 2 {
			l.ackTimes = append(l.ackTimes, float32(done.Sub(first).Seconds()*1000))
		}
		l.mu.Unlock()
		switch {
		case code/100 == 2:
			return true
		case code >= 400 && code < 500 && code != http.StatusTooManyRequests:
			l.mu.Lock()
			l.rejected++
			l.mu.Unlock()
			return false
		case time.Since(due) > l.giveUp:
			l.mu.Lock()
			l.gaveUp++
			l.mu.Unlock()
			return false
		}
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// post sends one remote write 1.0 request and returns its status.
func (l *soakLoad) post(ctx context.Context, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return statusConnErr
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", contentType(1))
	req.Header.Set("X-Prometheus-Remote-Write-Version", protoVersionHeader(1))
	req.Header.Set("User-Agent", "shale-tsdb-bench-soak")
	resp, err := l.client.Do(req)
	if err != nil {
		return classifyNetErr(ctx, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode
}

func classifyNetErr(ctx context.Context, err error) int {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return statusCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return statusRefused
	case errors.As(err, &ne) && ne.Timeout():
		return statusTimeout
	}
	return statusConnErr
}

// snapshot returns copies of the attempts and the time-to-ack figures.
func (l *soakLoad) snapshot() (attempts []rwAttempt, ackTimes []float32, gaveUp, rejected int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attempts), slices.Clone(l.ackTimes), l.gaveUp, l.rejected
}
