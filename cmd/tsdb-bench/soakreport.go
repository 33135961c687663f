package main

import (
	"cmp"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// s3PricePerThousand is S3 Standard's request price in USD per 1,000
// requests (us-east-1 list price): PUT, COPY, POST and LIST $0.005; GET and
// every other request $0.0004; DELETE free.
var s3PricePerThousand = [numOps]float64{
	opGET: 0.0004, opHEAD: 0.0004, opPUT: 0.005, opPOST: 0.005, opLIST: 0.005, opDELETE: 0, opOther: 0.0004,
}

// hoursPerMonth is AWS's billing month.
const hoursPerMonth = 730

// opCost is the requests of one operation and what they cost a month at
// the rate measured.
type opCost struct {
	Op          string
	Requests    int64
	PerHour     float64
	USDPerMonth float64
}

// s3Costs turns request counts over span into hourly rates and monthly
// costs, one row per operation with requests, and the total.
func s3Costs(ops [numOps]int64, span time.Duration) (rows []opCost, total opCost) {
	total.Op = "total"
	h := span.Hours()
	for op, n := range ops {
		if n == 0 {
			continue
		}
		c := opCost{Op: s3Op(op).String(), Requests: n}
		if h > 0 {
			c.PerHour = float64(n) / h
			c.USDPerMonth = c.PerHour * hoursPerMonth * s3PricePerThousand[op] / 1000
		}
		rows = append(rows, c)
		total.Requests += n
		total.PerHour += c.PerHour
		total.USDPerMonth += c.USDPerMonth
	}
	return rows, total
}

// firstOKAfter returns the completion time of the first 2xx remote write
// that completed at or after ref.
func firstOKAfter(attempts []rwAttempt, ref time.Duration) (time.Duration, bool) {
	best, ok := time.Duration(math.MaxInt64), false
	for _, a := range attempts {
		if a.status/100 == 2 && a.at >= ref && a.at < best {
			best, ok = a.at, true
		}
	}
	return best, ok
}

// readyAfter returns the time of the first /-/ready poll sent at or after
// ref that got 200.
func readyAfter(polls []readyPoll, ref time.Duration) (time.Duration, bool) {
	for _, p := range polls {
		if p.at >= ref && p.code == 200 {
			return p.at, true
		}
	}
	return 0, false
}

// readyCodes summarises the /-/ready answers of polls sent in [from, to),
// e.g. "no answer ×12, 503 ×40".
func readyCodes(polls []readyPoll, from, to time.Duration) string {
	n := map[int32]int{}
	for _, p := range polls {
		if p.at >= from && p.at < to {
			n[p.code]++
		}
	}
	if len(n) == 0 {
		return "—"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(n)) {
		name := fmt.Sprint(c)
		if c < 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, n[c]))
	}
	return strings.Join(parts, ", ")
}

// answersBetween summarises the answers to remote-write attempts that
// completed in [from, to), e.g. "503 ×12, connection refused ×3".
func answersBetween(attempts []rwAttempt, from, to time.Duration) string {
	n := map[int]int{}
	for _, a := range attempts {
		if a.at >= from && a.at < to {
			n[int(a.status)]++
		}
	}
	if len(n) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(n)) {
		name := statusText(c)
		if c > 0 {
			name = fmt.Sprint(c)
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", name, n[c]))
	}
	return strings.Join(parts, ", ")
}

// answersByCode counts remote-write attempts by answer.
func answersByCode(attempts []rwAttempt) map[int]int64 {
	m := map[int]int64{}
	for _, a := range attempts {
		m[int(a.status)]++
	}
	return m
}

func fmtDur(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(100 * time.Millisecond).String()
}

// fmtAt formats a time since the start as m:ss.
func fmtAt(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }

// soakFigures are the headline figures of a soak, shared by the report and
// the docs snippet.
type soakFigures struct {
	rows         [][2]string
	verdict      string
	pass         bool
	kills, terms int // restarts done
}

func (r *soakRun) figures(attempts []rwAttempt, ackTimes []float32, gaveUp, rejected int64, costTotal opCost, counts proxyCounts) soakFigures {
	var f soakFigures
	add := func(k, v string) { f.rows = append(f.rows, [2]string{k, v}) }
	sent, ackedReq, ackedSamples := r.book.totals()
	add("samples acknowledged (2xx)", fmtInt(ackedSamples)+fmt.Sprintf(" (%d of the %d requests sent)", ackedReq, sent))
	var unplanned []string
	kills, terms := 0, 0
	for _, e := range r.events {
		switch {
		case e.Kind == "unplanned exit":
			unplanned = append(unplanned, e.Exit.status())
		case e.Kind == "SIGKILL" && e.Exit != nil:
			kills++
		case e.Kind == "SIGTERM" && e.Exit != nil:
			terms++
		}
	}
	rb := r.readBack
	var bad []string
	if rb == nil && r.sc.ReadBackShards == 0 && !r.interrupted {
		add("read-back", "not asked for (-read-back-shards=0): samples not verified")
	} else if rb == nil {
		add("read-back", "not done (see notes)")
		bad = append(bad, "no read-back")
	} else {
		bad = append(bad, readBackRows(rb, "", add)...)
	}
	if r.sc.Reader {
		bad = append(bad, r.readerRows(add)...)
	}
	add("writer restarts by the harness", fmt.Sprintf("%d after SIGKILL, %d after SIGTERM", kills, terms))
	f.kills, f.terms = kills, terms
	u := "0"
	if len(unplanned) > 0 {
		u = fmt.Sprintf("%d (%s), each restarted by the harness", len(unplanned), countStrings(unplanned))
		bad = append(bad, fmt.Sprintf("%d unplanned exits", len(unplanned)))
	}
	add("unplanned writer exits", u)
	codes := answersByCode(attempts)
	var ok, n503, other, none int64
	for c, n := range codes {
		switch {
		case c/100 == 2:
			ok += n
		case c == 503:
			n503 += n
		case c < 0:
			none += n
		default:
			other += n
		}
	}
	var refused int64
	for _, a := range attempts {
		if a.status/100 != 2 {
			refused += int64(a.samples)
		}
	}
	add("samples in attempts without a 2xx (refused, failed or unanswered; retried)", fmtInt(refused))
	add("remote-write attempts", fmt.Sprintf("%s: %s 2xx, %s 503, %s other non-2xx, %s without an answer",
		fmtInt(int64(len(attempts))), fmtInt(ok), fmtInt(n503), fmtInt(other), fmtInt(none)))
	if gaveUp+rejected > 0 {
		add("remote-write requests dropped by the sender", fmt.Sprintf("%d given up after %s, %d rejected (4xx)", gaveUp, r.sc.GiveUp, rejected))
		bad = append(bad, fmt.Sprintf("%d requests never acknowledged", gaveUp+rejected))
	}
	var lat []float64
	for _, a := range attempts {
		if a.status/100 == 2 {
			lat = append(lat, float64(a.latency)/float64(time.Millisecond))
		}
	}
	add("remote-write latency p50 / p99 (2xx answers)", fmt.Sprintf("%s / %s ms", fmtNum(percentile(lat, 50)), fmtNum(percentile(lat, 99))))
	ack := make([]float64, len(ackTimes))
	for i, v := range ackTimes {
		ack[i] = float64(v)
	}
	add("time to acknowledge p99 (retries included)", fmt.Sprintf("%s ms (max %s ms)", fmtNum(percentile(ack, 99)), fmtNum(percentile(ack, 100))))
	add("query p50 / p99 (dashboards and alerts, successful)", queryLatencies(r.queries))
	add("query errors", queryErrors(r.queries, r.firstQueryErr))
	var rss, l0, l0d []float64
	for _, s := range r.samples {
		if !math.IsNaN(s.rss) {
			rss = append(rss, s.rss/(1<<20))
		}
		if !math.IsNaN(s.l0) {
			l0 = append(l0, s.l0)
		}
		if !math.IsNaN(s.l0Depth) {
			l0d = append(l0d, s.l0Depth)
		}
	}
	first, last := math.NaN(), math.NaN()
	if len(rss) > 0 {
		first, last = rss[0], rss[len(rss)-1]
	}
	add("writer RSS first / peak / last", fmt.Sprintf("%s / %s / %s MiB", fmtNum(first), fmtNum(percentile(rss, 100)), fmtNum(last)))
	lastL0 := math.NaN()
	if len(l0) > 0 {
		lastL0 = l0[len(l0)-1]
	}
	add("harness (tsdb-bench) RSS peak", fmt.Sprintf("%s MiB", fmtNum(maxOf(r.samples, func(s resSample) float64 { return s.selfRSS / (1 << 20) }))))
	if cpu := lastBefore(r.samples, r.elapsed, func(s resSample) float64 { return s.cpu }); !math.IsNaN(cpu) {
		add("writer CPU during the load", fmt.Sprintf("%s CPU-s over %s: %s cores on average, %s CPU-s per million samples acknowledged",
			fmtNum(cpu), fmtDur(r.elapsed), fmtNum(cpu/r.elapsed.Seconds()), fmtNum(cpu/(float64(ackedSamples)/1e6))))
	}
	if peak := maxCores(r.samples, time.Minute); !math.IsNaN(peak) {
		add("writer CPU, busiest minute", fmt.Sprintf("%s cores", fmtNum(peak)))
	}
	var loads []float64
	for _, s := range r.samples {
		if !math.IsNaN(s.load1) && s.at <= r.elapsed {
			loads = append(loads, s.load1)
		}
	}
	add("machine load average (1 min) median / max during the load", fmt.Sprintf("%s / %s on %d CPUs", fmtNum(percentile(loads, 50)), fmtNum(percentile(loads, 100)), runtime.NumCPU()))
	for _, sb := range []struct {
		name string
		n    int64
	}{{"stored bytes at the end of the load", r.storedAtEnd}, {"stored bytes after the final clean stop", r.storedFinal}} {
		if sb.n >= 0 && ackedSamples > 0 {
			add(sb.name, fmt.Sprintf("%s (%s bytes per acknowledged sample)", fmtInt(sb.n), fmtNum(float64(sb.n)/float64(ackedSamples))))
		}
	}
	if r.heapPeak != "" {
		add("heap profile near the RSS peak", r.heapPeak)
	}
	if len(l0d) > 0 {
		add("L0 depth (compaction debt: writes stall at 24) max / last", fmt.Sprintf("%s / %s", fmtNum(percentile(l0d, 100)), fmtNum(l0d[len(l0d)-1])))
	}
	add("L0 tables max / last", fmt.Sprintf("%s / %s", fmtNum(percentile(l0, 100)), fmtNum(lastL0)))
	add("object-store requests", fmt.Sprintf("%s per hour, $%.2f a month at S3 list prices", fmtNum(costTotal.PerHour), costTotal.USDPerMonth))
	var fk []string
	var injected int64
	for k := faultSlowDown; k < numFaultKinds; k++ {
		if counts.Faults[k] > 0 {
			fk = append(fk, fmt.Sprintf("%s %d", k, counts.Faults[k]))
			injected += counts.Faults[k]
		}
	}
	add("store faults injected", fmt.Sprintf("%d (%s)", injected, strings.Join(fk, ", ")))
	var maxTerm time.Duration
	var unclean []string
	for _, e := range r.events {
		if (strings.Contains(e.Kind, "SIGTERM") || e.Kind == "stop after read-back") && e.Exit != nil {
			maxTerm = max(maxTerm, e.Took)
			if e.Forced || e.Exit.Code != 0 {
				unclean = append(unclean, e.Exit.status())
			}
		}
	}
	add("slowest SIGTERM shutdown", fmtDur(maxTerm))
	if len(unclean) > 0 {
		add("SIGTERM shutdowns that did not exit 0", fmt.Sprintf("%d (%s)", len(unclean), countStrings(unclean)))
		bad = append(bad, fmt.Sprintf("%d SIGTERM shutdowns not clean", len(unclean)))
	}
	f.pass = len(bad) == 0
	switch {
	case f.pass && rb == nil:
		f.verdict = "PASS: no unplanned exit; no read-back asked for."
	case f.pass && rb.Shards < rb.OfShards:
		f.verdict = fmt.Sprintf("PASS: every acknowledged sample of the %d shards read back once with its value; no unplanned exit.", rb.Shards)
	case f.pass:
		f.verdict = "PASS: every acknowledged sample read back once with its value; no unplanned exit."
	default:
		f.verdict = "FAIL: " + strings.Join(bad, ", ") + "."
	}
	return f
}

// readBackRows adds the rows of a read-back, each name prefixed with who
// (empty: the writer), and returns what in it fails the soak.
func readBackRows(rb *readBackResult, who string, add func(k, v string)) (bad []string) {
	if rb.Shards < rb.OfShards {
		add(who+"read-back", fmt.Sprintf("every acknowledged sample of %d of the %d shards (series groups sent in one request), in %s", rb.Shards, rb.OfShards, fmtDur(rb.Took)))
	} else {
		add(who+"read-back", fmt.Sprintf("every acknowledged sample, in %s", fmtDur(rb.Took)))
	}
	add(who+"acknowledged samples lost", fmtInt(rb.Lost))
	add(who+"duplicated samples (two at one series and timestamp)", fmtInt(rb.Duplicated))
	add(who+"altered samples (value differs from what was sent)", fmtInt(rb.Altered))
	add(who+"unexpected samples (series or timestamp never sent)", fmtInt(rb.Unexpected))
	add(who+"stored though never acknowledged (allowed)", fmtInt(rb.Unacked))
	if rb.Unverified > 0 || rb.QueryErrors > 0 {
		add(who+"acknowledged samples not verified (read-back query failed)", fmt.Sprintf("%s (%d of %d queries failed)", fmtInt(rb.Unverified), rb.QueryErrors, rb.Queries))
	}
	for _, c := range []struct {
		n    int64
		name string
	}{{rb.Lost, "lost"}, {rb.Duplicated, "duplicated"}, {rb.Altered, "altered"}, {rb.Unexpected, "unexpected"}, {rb.Unverified, "unverified"}} {
		if c.n > 0 {
			bad = append(bad, fmt.Sprintf("%s%d %s", who, c.n, c.name))
		}
	}
	return bad
}

// readerRows adds the read replica's rows and returns what in them fails
// the soak: an exit of its own, not catching up with the writer at the end,
// and what fails a read-back. Its query errors are reported, as the
// writer's are: queries fail while the store is away.
func (r *soakRun) readerRows(add func(k, v string)) (bad []string) {
	var exits []string
	for _, e := range r.events {
		if e.Kind == readerUnplanned {
			exits = append(exits, e.Exit.status())
		}
	}
	u := "0"
	if len(exits) > 0 {
		u = fmt.Sprintf("%d (%s), each restarted by the harness", len(exits), countStrings(exits))
		bad = append(bad, fmt.Sprintf("reader: %d unplanned exits", len(exits)))
	}
	add("reader: unplanned exits", u)
	add("reader: query p50 / p99 (successful)", queryLatencies(r.readerQueries))
	add("reader: query errors", queryErrors(r.readerQueries, r.firstReaderQueryErr))
	rb := r.readerReadBack
	if rb == nil {
		if r.readBack != nil {
			add("reader: read-back", "not done (see notes)")
			bad = append(bad, "reader: no read-back")
		}
		return bad
	}
	if r.readerCaughtUp >= 0 {
		add("reader: caught up with the writer at the end", "in "+fmtDur(r.readerCaughtUp))
	} else {
		add("reader: caught up with the writer at the end", "not within 2m")
		bad = append(bad, "reader: did not catch up")
	}
	return append(bad, readBackRows(rb, "reader: ", add)...)
}

func countStrings(xs []string) string {
	n := map[string]int{}
	for _, x := range xs {
		n[x]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, n[k]))
	}
	return strings.Join(parts, ", ")
}

func fmtInt(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// writeReport writes soak-report.md, soak-snippet.md and soak-timeline.svg
// under o.out and the report to stdout. It returns an error naming what
// failed when the verdict is not a pass.
func (r *soakRun) writeReport(stdout io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	attempts, ackTimes, gaveUp, rejected := r.load.snapshot()
	counts, span := r.proxyCounts, r.proxySpan
	costRows, costTotal := s3Costs(counts.totalOps(), span)
	fig := r.figures(attempts, ackTimes, gaveUp, rejected, costTotal, counts)
	o, sc := r.o, r.sc

	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nCommand: `tsdb-bench %s`\n\n", sc.title(), strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "%s of remote write 1.0 (%d series, %d requests every %s, WAL on) and dashboard queries against Shale on versitygw "+
		"behind a fault proxy: %s added to every object-store request, %g %% of requests faulted (%s), the store away for %s (%s) at %s, "+
		"%d SIGKILL and %d SIGTERM restarts of the writer planned, then a clean restart and a read-back of every acknowledged sample.",
		r.elapsed.Round(time.Second), r.load.gen.activeSeries(), len(r.load.gen.shards), o.load.Interval,
		sc.Faults.Latency, sc.Faults.Rate*100, sc.FaultMix, sc.Outage, sc.OutageMode,
		fmtAt(time.Duration(float64(o.load.Duration)*sc.OutageAt)), sc.Kills, sc.Terms)
	if r.interrupted {
		b.WriteString(" **Interrupted**: the figures cover the part that ran; no read-back.")
	}
	fmt.Fprintf(&b, "\n\n**%s**\n\n", fig.verdict)
	b.WriteString("| figure | value |\n|---|---|\n")
	for _, row := range fig.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], cell(row[1]))
	}

	b.WriteString("\n## Recovery after each fault\n\nTimes since the start of the load. *Back* is the restart (kills, exits) or the store's return (outage); " +
		"recovery is measured from it to the first 2xx answer to a remote write and to the first 200 from `/-/ready`.\n\n")
	b.WriteString("| # | fault | at | back after | first 2xx write | /-/ready 200 | remote-write answers from the fault to the first 2xx | /-/ready answers from the fault to ready | exit |\n" +
		"|---:|---|---:|---:|---:|---:|---|---|---|\n")
	for i, e := range r.events {
		back, okAfter, readyIn, codes, answers := "—", "—", "—", "—", "—"
		final := e.Start >= r.elapsed // the load has stopped: no write to wait for
		if e.Ref >= 0 {
			back = fmtDur(e.Ref - e.Start)
			if t, ok := firstOKAfter(attempts, e.Ref); ok && !final {
				okAfter = fmtDur(t - e.Ref)
				answers = answersBetween(attempts, e.Start, t)
			} else if !final {
				okAfter = "none by the end"
				answers = answersBetween(attempts, e.Start, time.Duration(math.MaxInt64))
			}
			to := time.Duration(math.MaxInt64)
			if t, ok := readyAfter(r.polls, e.Ref); ok {
				readyIn = fmtDur(t - e.Ref)
				to = t
			} else {
				readyIn = "none by the end"
			}
			codes = readyCodes(r.polls, e.Start, to)
		}
		exit := ""
		if e.Exit != nil {
			exit = e.Exit.status()
			if e.Took > 0 {
				exit += " after " + fmtDur(e.Took)
			}
			if e.Forced {
				exit += " (SIGKILL needed)"
			}
			if e.Kind == "unplanned exit" && e.Exit.LastError != "" {
				exit += ": " + e.Exit.LastError
			}
		}
		if e.Note != "" {
			exit = strings.TrimPrefix(exit+"; "+e.Note, "; ")
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", i+1, e.Kind, fmtAt(e.Start), back, okAfter, readyIn, cell(answers), cell(codes), cell(exit))
	}

	b.WriteString("\n## Remote-write answers\n\n| answer | attempts |\n|---|---:|\n")
	codes := answersByCode(attempts)
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		fmt.Fprintf(&b, "| %s | %s |\n", statusText(c), fmtInt(codes[c]))
	}

	fmt.Fprintf(&b, "\n## Object-store requests\n\nCounted by the fault proxy over %s, from the writer's first start to the end of the load (faulted requests included), priced at S3 Standard list prices "+
		"(PUT, POST, LIST $0.005 per 1,000; GET, HEAD $0.0004 per 1,000; DELETE free) for a %d-hour month at the rate measured.\n\n", span.Round(time.Second), hoursPerMonth)
	b.WriteString("| operation | requests | per hour | USD per month |\n|---|---:|---:|---:|\n")
	for _, c := range append(costRows, costTotal) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f |\n", c.Op, fmtInt(c.Requests), fmtNum(c.PerHour), c.USDPerMonth)
	}
	if len(counts.Ops) > 1 {
		b.WriteString("\nBy hour of the run:\n\n| hour |")
		for op := range numOps {
			b.WriteString(" " + s3Op(op).String() + " |")
		}
		b.WriteString("\n|---:|" + strings.Repeat("---:|", int(numOps)) + "\n")
		for h, row := range counts.Ops {
			fmt.Fprintf(&b, "| %d |", h+1)
			for _, n := range row {
				b.WriteString(" " + fmtInt(n) + " |")
			}
			b.WriteString("\n")
		}
	}

	if rb := r.readBack; rb != nil {
		fmt.Fprintf(&b, "\n## Read-back\n\n%d instant queries of raw samples (`{instance=...}[%s]`) after a clean restart with faults off; %d failed",
			rb.Queries, sc.ReadWindow, rb.QueryErrors)
		if rb.FirstError != "" {
			fmt.Fprintf(&b, " (first: %s)", cell(rb.FirstError))
		}
		b.WriteString(".\n")
		if len(rb.LostByMinute) > 0 {
			b.WriteString("\nLost samples by minute of the run: ")
			var parts []string
			for _, m := range slices.Sorted(maps.Keys(rb.LostByMinute)) {
				parts = append(parts, fmt.Sprintf("%d: %d", m, rb.LostByMinute[m]))
			}
			b.WriteString(strings.Join(parts, ", ") + ".\n")
		}
		for _, ex := range rb.Examples {
			fmt.Fprintf(&b, "- %s\n", ex)
		}
	}
	if len(r.notes) > 0 {
		b.WriteString("\n## Log of the run\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nTimeline: soak-timeline.svg; for the docs, soak-snippet.md (copy the SVG beside it). Writer log: %s.\n", filepath.Join(r.dir, "shale.log"))

	// A short version for docs/benchmarks.md.
	var sn strings.Builder
	fmt.Fprintf(&sn, "### Fault soak, %s\n\n`tsdb-bench %s` (`make soak` runs 2 h): %s of remote write 1.0 from %d series every %s into Shale on versitygw "+
		"behind a fault proxy (%s latency, %g %% of object-store requests faulted: 503 SlowDown, reset, answer lost after the write; "+
		"the store away for %s, %s), %d SIGKILL and %d SIGTERM restarts, then every acknowledged sample read back.\n\n**%s**\n\n| figure | value |\n|---|---|\n",
		time.Now().Format("2006-01-02"), strings.Join(os.Args[1:], " "), r.elapsed.Round(time.Second), r.load.gen.activeSeries(), o.load.Interval,
		sc.Faults.Latency, sc.Faults.Rate*100, sc.Outage, sc.OutageMode, fig.kills, fig.terms, fig.verdict)
	for _, row := range fig.rows {
		fmt.Fprintf(&sn, "| %s | %s |\n", row[0], cell(row[1]))
	}
	sn.WriteString("\n![Fault soak: writer RSS, L0 tables and remote-write outcomes over time, faults marked](soak-timeline.svg)\n")

	if err := os.WriteFile(filepath.Join(o.out, "soak-report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "soak-snippet.md"), []byte(sn.String()), 0o644); err != nil {
		return err
	}
	svg := soakSVG(r.sc.title(), r.elapsed, r.samples, attempts, r.events)
	if err := os.WriteFile(filepath.Join(o.out, "soak-timeline.svg"), []byte(svg), 0o644); err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	if !fig.pass {
		return fmt.Errorf("soak failed: %s", strings.TrimSuffix(strings.TrimPrefix(fig.verdict, "FAIL: "), "."))
	}
	return nil
}

// soakSVG draws three charts over the run: the writer's RSS, its L0
// tables, and remote-write attempts per interval by outcome; outages are
// shaded, restarts and exits drawn as vertical lines.
func soakSVG(title string, elapsed time.Duration, samples []resSample, attempts []rwAttempt, events []soakEventRecord) string {
	const w, chartH, x0, cw = 960, 170, 70, 700
	xMax := math.Max(elapsed.Seconds(), 1)
	var rss, l0, l0d, load [][2]float64
	for _, s := range samples {
		if s.at.Seconds() > xMax {
			continue
		}
		rss = append(rss, [2]float64{s.at.Seconds(), s.rss / (1 << 20)})
		l0 = append(l0, [2]float64{s.at.Seconds(), s.l0})
		l0d = append(l0d, [2]float64{s.at.Seconds(), s.l0Depth})
		load = append(load, [2]float64{s.at.Seconds(), s.load1})
	}
	var cores [][2]float64
	for _, p := range coresSeries(samples, 30*time.Second) {
		if p[0] <= xMax {
			cores = append(cores, p)
		}
	}
	width := max(5*time.Second, (elapsed / 120).Round(time.Second))
	nb := int(elapsed/width) + 1
	outcome := func(a rwAttempt) int {
		switch {
		case a.status/100 == 2:
			return 0
		case a.status == 503:
			return 1
		case a.status < 0:
			return 3
		}
		return 2
	}
	counts := make([][4]float64, nb)
	for _, a := range attempts {
		if b := int(a.at / width); b < nb {
			counts[b][outcome(a)]++
		}
	}
	rw := make([][][2]float64, 4)
	for b := range nb {
		x := (time.Duration(b)*width + width/2).Seconds()
		for k := range 4 {
			rw[k] = append(rw[k], [2]float64{x, counts[b][k]})
		}
	}
	names := []string{"2xx", "503", "other non-2xx", "no answer"}
	colors := []string{"#2ca02c", "#d62728", "#9467bd", "#ff7f0e"}

	const nPanels = 4
	h := 60 + nPanels*(chartH+55) + 40
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="22" text-anchor="middle" font-size="15">%s: %s</text>`+"\n", w/2, html.EscapeString(title), html.EscapeString(elapsed.Round(time.Second).String()))
	panels := []struct {
		title  string
		series [][][2]float64
		names  []string
		colors []string
	}{
		{"writer RSS (MiB)", [][][2]float64{rss}, []string{"RSS"}, []string{"#1f77b4"}},
		{"writer CPU (cores, per 30 s) and the machine's load average", [][][2]float64{cores, load}, []string{"writer cores", "load avg 1m"}, []string{"#17becf", "#7f7f7f"}},
		{"L0 tables, and L0 depth (compaction debt: writes stall at 24)", [][][2]float64{l0, l0d}, []string{"L0 tables", "L0 depth"}, []string{"#8c564b", "#d62728"}},
		{fmt.Sprintf("remote-write attempts per %s by outcome", width), rw, names, colors},
	}
	for i, p := range panels {
		y0 := 50 + i*(chartH+55)
		soakPanel(&sb, x0, y0, cw, chartH, xMax, p.title, p.series, p.colors, events)
		for j, n := range p.names {
			ly := y0 + 12 + j*18
			fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", x0+cw+20, ly, x0+cw+45, ly, p.colors[j])
			fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", x0+cw+52, ly+4, html.EscapeString(n))
		}
	}
	// Legend of the fault marks and the time axis label.
	ly := 50 + nPanels*(chartH+55) - 10
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">seconds since the start of the load</text>`+"\n", x0+cw/2, ly-8)
	marks := []struct{ name, color, dash string }{{"outage", "#f4b6b6", ""}, {"SIGKILL", "#d62728", ""}, {"SIGTERM", "#1f77b4", ""}, {"unplanned exit", "#ff7f0e", "4,3"}}
	for i, m := range marks {
		x := x0 + i*150
		if m.name == "outage" {
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="20" height="12" fill="%s"/>`+"\n", x, ly+10, m.color)
		} else {
			fmt.Fprintf(&sb, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", x+10, ly+8, x+10, ly+24, m.color, m.dash)
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", x+26, ly+20, m.name)
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// soakPanel draws one chart: axes, fault marks, then the lines, broken
// where a value is NaN (no writer, no answer).
func soakPanel(sb *strings.Builder, x0, y0, cw, ch int, xMax float64, title string, series [][][2]float64, colors []string, events []soakEventRecord) {
	maxY := 0.0
	for _, s := range series {
		for _, p := range s {
			if !math.IsNaN(p[1]) {
				maxY = math.Max(maxY, p[1])
			}
		}
	}
	maxY = niceCeil(maxY)
	xp := func(x float64) float64 { return float64(x0) + float64(cw)*math.Min(x, xMax)/xMax }
	yp := func(y float64) float64 { return float64(y0+ch) - float64(ch)*math.Min(y, maxY)/maxY }
	fmt.Fprintf(sb, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", x0, y0-8, html.EscapeString(title))
	for _, e := range events {
		if strings.HasPrefix(e.Kind, "outage") {
			end := e.Ref
			if end < 0 {
				end = time.Duration(xMax * float64(time.Second))
			}
			fmt.Fprintf(sb, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f4b6b6" opacity="0.6"/>`+"\n",
				xp(e.Start.Seconds()), y0, math.Max(1, xp(end.Seconds())-xp(e.Start.Seconds())), ch)
		}
	}
	fmt.Fprintf(sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, cw, ch)
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		y := yp(v)
		fmt.Fprintf(sb, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+cw, y)
		fmt.Fprintf(sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-5, y+4, fmtNum(v))
	}
	for i := 0; i <= 6; i++ {
		v := xMax * float64(i) / 6
		fmt.Fprintf(sb, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xp(v), y0+ch+15, fmtNum(math.Round(v)))
	}
	for _, e := range events {
		color, dash := "", ""
		switch {
		case e.Kind == "SIGKILL" && e.Exit != nil: // not a skipped one
			color = "#d62728"
		case e.Kind == "SIGTERM" && e.Exit != nil:
			color = "#1f77b4"
		case e.Kind == "unplanned exit":
			color, dash = "#ff7f0e", "4,3"
		default:
			continue
		}
		x := xp(e.Start.Seconds())
		fmt.Fprintf(sb, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", x, y0, x, y0+ch, color, dash)
	}
	for i, s := range series {
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(sb, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`+"\n", colors[i%len(colors)], strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for _, p := range s {
			if math.IsNaN(p[1]) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xp(p[0]), yp(p[1])))
		}
		flush()
	}
}

// maxOf is the largest f(s) over samples, NaN when none is a number.
func maxOf(samples []resSample, f func(resSample) float64) float64 {
	m := math.NaN()
	for _, s := range samples {
		if v := f(s); !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}

// lastBefore is f of the last sample taken by at whose f is a number.
func lastBefore(samples []resSample, at time.Duration, f func(resSample) float64) float64 {
	v := math.NaN()
	for _, s := range samples {
		if s.at <= at && !math.IsNaN(f(s)) {
			v = f(s)
		}
	}
	return v
}

// coresSeries turns the cumulative writer CPU seconds of the samples into
// cores used over windows of at least width: (x, cores) at each window's
// end.
func coresSeries(samples []resSample, width time.Duration) [][2]float64 {
	var out [][2]float64
	prev := -1
	for i, s := range samples {
		if math.IsNaN(s.cpu) {
			continue
		}
		if prev < 0 {
			prev = i
			continue
		}
		p := samples[prev]
		if dt := s.at - p.at; dt >= width {
			out = append(out, [2]float64{s.at.Seconds(), (s.cpu - p.cpu) / dt.Seconds()})
			prev = i
		}
	}
	return out
}

// maxCores is the most cores the writer used over a window of width.
func maxCores(samples []resSample, width time.Duration) float64 {
	m := math.NaN()
	for _, p := range coresSeries(samples, width) {
		if math.IsNaN(m) || p[1] > m {
			m = p[1]
		}
	}
	return m
}

// queryErrors says how many queries failed, how (most frequent kind
// first), and the first failure's message.
// queryLatencies gives the p50 and p99 of the successful queries of qs.
func queryLatencies(qs []queryPoint) string {
	var ok []float64
	for _, q := range qs {
		if q.ok {
			ok = append(ok, float64(q.latency)/float64(time.Millisecond))
		}
	}
	return fmt.Sprintf("%s / %s ms over %d queries", fmtNum(percentile(ok, 50)), fmtNum(percentile(ok, 99)), len(ok))
}

func queryErrors(qs []queryPoint, first string) string {
	kinds := map[string]int{}
	n := 0
	for _, q := range qs {
		if !q.ok {
			n++
			kinds[cmp.Or(q.kind, "other")]++
		}
	}
	if n == 0 {
		return "0"
	}
	names := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(kinds[b]-kinds[a], strings.Compare(a, b)) })
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s ×%d", k, kinds[k])
	}
	out := fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
	if first != "" {
		out += fmt.Sprintf("; the first: %.160s", first)
	}
	return out
}
