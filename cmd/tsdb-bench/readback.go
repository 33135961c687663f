package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// readBackResult is what reading every acknowledged sample back found.
type readBackResult struct {
	Acked      int64 // samples whose request got a 2xx
	Found      int64 // acknowledged samples read back (Altered says if their values differ)
	Lost       int64 // acknowledged samples not read back
	Duplicated int64 // samples beyond the first at one (series, timestamp)
	Altered    int64 // samples whose value differs from what was sent
	// Unacked counts samples read back whose request never got a 2xx (a
	// write applied though its answer was lost or came too late): allowed.
	Unacked int64
	// Unexpected counts samples at a series or timestamp never sent.
	Unexpected int64
	// Unverified counts acknowledged samples in windows whose query failed.
	Unverified  int64
	Queries     int
	QueryErrors int
	FirstError  string
	Examples    []string // the first few lost, duplicated and altered samples
	// LostByMinute counts lost samples by the minute of the soak their
	// timestamp falls in.
	LostByMinute map[int]int64
	// Shards is how many of the book's shards were read back; Took, how
	// long the read-back took.
	Shards, OfShards int
	Took             time.Duration
}

func (r *readBackResult) example(format string, args ...any) {
	if len(r.Examples) < 12 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// rawQuery evaluates an instant query at ms and returns the API's JSON.
type rawQuery func(ctx context.Context, expr string, atMs int64) ([]byte, error)

// apiQuery returns a rawQuery against the Prometheus HTTP API at base.
func apiQuery(client *http.Client, base string) rawQuery {
	return func(ctx context.Context, expr string, atMs int64) ([]byte, error) {
		v := url.Values{"query": {expr}, "time": {fmtMillis(atMs)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/query", strings.NewReader(v.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
		}
		return body, nil
	}
}

// fmtMillis formats ms as seconds with three decimals.
func fmtMillis(ms int64) string {
	return fmt.Sprintf("%d.%03d", ms/1000, ms%1000)
}

// parseMillis parses an API timestamp (seconds, as a JSON number) to ms.
func parseMillis(n json.Number) (int64, error) {
	s := n.String()
	if sec, frac, ok := strings.Cut(s, "."); ok && len(frac) <= 3 && !strings.ContainsAny(s, "eE") {
		a, err1 := strconv.ParseInt(sec, 10, 64)
		b, err2 := strconv.ParseInt((frac + "000")[:3], 10, 64)
		if err1 == nil && err2 == nil && a >= 0 {
			return a*1000 + b, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return int64(math.Round(f * 1000)), nil
}

// matrixResult is the part of a query API answer the read-back uses.
type matrixResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"` // [json.Number seconds, string value]
		} `json:"result"`
	} `json:"data"`
}

// shardSelector selects the series of one shard by their instance labels.
func shardSelector(instances []string) string {
	if len(instances) == 1 {
		return fmt.Sprintf("{instance=%q}", instances[0])
	}
	q := make([]string, len(instances))
	for i, in := range instances {
		q[i] = regexp.QuoteMeta(in)
	}
	return fmt.Sprintf("{instance=~%q}", strings.Join(q, "|"))
}

// readBack reads every sample of every shard back with instant queries of
// a range selector (expr[window] at t returns the raw samples in
// (t-window, t]: exactly what was stored, no lookback, no step alignment)
// and compares them with the book. start is when the soak started, for
// LostByMinute; a failed query is tried twice more, retryWait and twice
// that later. only lists the shards to read back; nil: all.
func readBack(ctx context.Context, book *ackBook, ss *soakSeries, query rawQuery, window time.Duration, start time.Time, retryWait time.Duration, only []int) *readBackResult {
	res := &readBackResult{LostByMinute: map[int]int64{}, OfShards: len(book.shards)}
	steps := book.maxStep()
	if steps == 0 {
		return res
	}
	book.mu.Lock()
	shards := make([]bookShard, len(book.shards))
	for i, s := range book.shards {
		shards[i] = s
		shards[i].sent = append(bitset(nil), s.sent...)
		shards[i].acked = append(bitset(nil), s.acked...)
	}
	book.mu.Unlock()
	if only == nil {
		only = make([]int, len(shards))
		for i := range only {
			only[i] = i
		}
	}
	res.Shards = len(only)
	w := window.Milliseconds()
	for _, si := range only {
		bs := shards[si]
		counts := make([]uint8, bs.n*int(steps)) // samples read at (series, step)
		read := make([]bool, steps)              // steps whose window was read
		lo, hi := book.ts(si, 0), book.ts(si, steps-1)
		sel := shardSelector(bs.instances)
		for at := lo - 1 + w; ; at += w {
			res.Queries++
			body, err := queryWithRetry(ctx, query, fmt.Sprintf("%s[%dms]", sel, w), at, retryWait)
			if err == nil {
				err = res.compare(body, book, ss, si, bs, counts, steps)
			}
			if err != nil {
				res.QueryErrors++
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
			} else {
				for s := range steps {
					if ts := book.ts(si, s); ts > at-w && ts <= at {
						read[s] = true
					}
				}
			}
			if at >= hi || ctx.Err() != nil {
				break
			}
		}
		for j := range bs.n {
			for s := range steps {
				c := counts[j*int(steps)+int(s)]
				acked := bs.acked.has(int(s))
				switch {
				case acked && !read[s]:
					res.Acked++
					res.Unverified++
				case acked && c == 0:
					res.Acked++
					res.Lost++
					ts := book.ts(si, s)
					res.LostByMinute[int(time.UnixMilli(ts).Sub(start)/time.Minute)]++
					res.example("lost: %s at %s (%s into the soak)", ss.names[bs.first+j], fmtMillis(ts),
						time.UnixMilli(ts).Sub(start).Round(time.Second))
				case acked:
					res.Acked++
					res.Found++
				case c > 0 && bs.sent.has(int(s)):
					res.Unacked++
				case c > 0:
					res.Unexpected++
				}
			}
		}
	}
	return res
}

func queryWithRetry(ctx context.Context, query rawQuery, expr string, at int64, wait time.Duration) ([]byte, error) {
	var err error
	for attempt := range 3 {
		if attempt > 0 && !sleepCtx(ctx, time.Duration(attempt)*wait) {
			return nil, ctx.Err()
		}
		var body []byte
		if body, err = query(ctx, expr, at); err == nil {
			return body, nil
		}
	}
	return nil, err
}

// compare checks one query answer for shard si: every sample must belong to
// a series and step of the shard, hold the value sent, and be the only one
// at its (series, step). It counts the samples read into counts.
func (r *readBackResult) compare(body []byte, book *ackBook, ss *soakSeries, si int, bs bookShard, counts []uint8, steps int64) error {
	var m matrixResult
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("decode query answer: %w", err)
	}
	if m.Status != "success" {
		return fmt.Errorf("query failed: %s", m.Error)
	}
	if m.Data.ResultType != "matrix" {
		return fmt.Errorf("query answered a %q, want a matrix", m.Data.ResultType)
	}
	for _, series := range m.Data.Result {
		names := make([]string, 0, len(series.Metric))
		values := make([]string, 0, len(series.Metric))
		for n, v := range series.Metric {
			names, values = append(names, n), append(values, v)
		}
		gi, ok := ss.index[labelsKey(names, values)]
		j := int(gi) - bs.first
		if !ok || j < 0 || j >= bs.n {
			r.Unexpected += int64(len(series.Values))
			r.example("unexpected series %v (%d samples)", series.Metric, len(series.Values))
			continue
		}
		for _, p := range series.Values {
			tn, ok1 := p[0].(json.Number)
			vs, ok2 := p[1].(string)
			if !ok1 || !ok2 {
				return fmt.Errorf("sample %v of %v: want [seconds, \"value\"]", p, series.Metric)
			}
			ts, err := parseMillis(tn)
			if err != nil {
				return err
			}
			step, ok := book.step(si, ts)
			if !ok || step >= steps {
				r.Unexpected++
				r.example("unexpected: %s at %s, a timestamp never sent", ss.names[gi], fmtMillis(ts))
				continue
			}
			c := &counts[j*int(steps)+int(step)]
			if *c > 0 {
				r.Duplicated++
				r.example("duplicated: %s at %s (%d samples there)", ss.names[gi], fmtMillis(ts), int(*c)+1)
			}
			if *c < math.MaxUint8 {
				*c++
			}
			got, err := strconv.ParseFloat(vs, 64)
			want := soakValue(ss.kinds[gi], int(gi), step, ss.seed)
			if err != nil || got != want {
				r.Altered++
				r.example("altered: %s at %s is %s, %v was sent", ss.names[gi], fmtMillis(ts), vs, want)
			}
		}
	}
	return nil
}
