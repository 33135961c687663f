package main

// The fault soak (tsdb-bench -mode=soak): Shale writes to a real
// S3-compatible server (versitygw) through a fault proxy that adds latency,
// 503 SlowDown answers, connection resets and lost answers, and takes the
// store away once; the harness kills and restarts the writer, sends remote
// writes and dashboard queries throughout, then reads every acknowledged
// sample back after a clean restart and reports what was lost, duplicated
// or altered, how long each fault took to recover from, memory, compaction
// debt and object-store requests.
//
//	make soak         # 2 h
//	make soak-short   # 15 min

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shaledb/shale/internal/versitygw"
)

// soakConfig holds the soak's settings; the load's (series, interval,
// duration, seed) are in options.load.
type soakConfig struct {
	Kills       int // SIGKILL restarts; negative picks 5 per 2 h, at least 3
	Terms       int // SIGTERM restarts
	Outage      time.Duration
	OutageAt    float64 // fraction of the duration at which the outage starts
	OutageMode  string  // refuse or hang
	Faults      faultConfig
	FaultMix    string
	VersityGW   string
	SampleEvery time.Duration // RSS and L0 sampling period
	ReadyEvery  time.Duration // /-/ready polling period
	QueryPause  time.Duration // pause between rounds of the query set
	RWTimeout   time.Duration // remote-write client timeout
	GiveUp      time.Duration // a request still failing this long after its due time is dropped
	ReadWindow  time.Duration // range of each read-back query
	// ReadBackShards is how many shards (requests' series groups) the
	// final read-back checks, spread evenly; negative: all, 0: none.
	ReadBackShards int
	HeapProfile    bool // save the writer's heap profile when its RSS passes that of the last one
	// Reader runs a read replica (--mode=reader) beside the writer, through
	// the same faulty store; it is queried during the run and read back at
	// the end.
	Reader bool
	// DataOffset shifts the data time from the wall clock: a sample is sent
	// when the wall clock reaches its timestamp less DataOffset, and the
	// queries ask about the wall clock plus DataOffset. A negative offset
	// makes a run cross a partition boundary when wanted.
	DataOffset time.Duration
}

// title names the run in its report: a fault soak, or a clean load when
// nothing is injected.
func (c *soakConfig) title() string {
	if c.Kills == 0 && c.Terms == 0 && c.Outage == 0 && c.Faults.Rate == 0 {
		return "Shale soak, no faults"
	}
	return "Shale fault soak"
}

func addSoakFlags(fs *flag.FlagSet, c *soakConfig) {
	d := defaultFaultConfig()
	fs.IntVar(&c.Kills, "kills", -1, "soak: SIGKILL restarts of the writer, spread over the run; negative: 5 per 2 h, at least 3; 0: none")
	fs.IntVar(&c.Terms, "terms", 1, "soak: SIGTERM restarts of the writer")
	fs.DurationVar(&c.Outage, "outage", 2*time.Minute, "soak: how long the store is away (once); 0: no outage")
	fs.Float64Var(&c.OutageAt, "outage-at", 0.4, "soak: when the outage starts, as a fraction of -duration")
	fs.StringVar(&c.OutageMode, "outage-mode", "refuse", "soak: refuse (every request gets a connection reset) or hang (requests get no answer until the store is back, then a reset)")
	fs.DurationVar(&c.Faults.Latency, "store-latency", d.Latency, "soak and coldwarm: latency the fault proxy adds to every object-store request")
	fs.Float64Var(&c.Faults.Rate, "fault-rate", d.Rate, "soak: fraction of object-store requests that get a fault")
	fs.StringVar(&c.FaultMix, "fault-mix", "slowdown=1,reset=1,drop=1", "soak: weights of the faults: slowdown (503 SlowDown), reset (connection reset before forwarding), drop (answer dropped after the store applied the request), truncate (a GET answer cut off halfway), corrupt (a GET answer with one bit flipped), stall (a GET answer that stops halfway, the connection left open)")
	fs.StringVar(&c.VersityGW, "versitygw-bin", ".tools/versitygw", "soak, coldwarm and the shale-s3 system: versitygw binary (make tools)")
	fs.DurationVar(&c.SampleEvery, "sample-every", 5*time.Second, "soak: period of the RSS and L0-table samples")
	fs.DurationVar(&c.ReadyEvery, "ready-every", 250*time.Millisecond, "soak: period of the /-/ready polls")
	fs.DurationVar(&c.QueryPause, "query-pause", 5*time.Second, "soak: pause between rounds of the dashboard and alert queries")
	fs.DurationVar(&c.RWTimeout, "rw-timeout", 30*time.Second, "soak: remote-write request timeout (Prometheus' remote_timeout)")
	fs.DurationVar(&c.GiveUp, "give-up", 10*time.Minute, "soak: drop a remote-write request still failing this long after its samples' timestamp")
	fs.DurationVar(&c.ReadWindow, "read-window", time.Hour, "soak: data-time range of each read-back query")
	fs.IntVar(&c.ReadBackShards, "read-back-shards", -1, "soak: remote-write shards (series sent in one request) whose every acknowledged sample the final read-back checks, spread evenly; negative: all; 0: no read-back")
	fs.DurationVar(&c.DataOffset, "data-offset", 0, "soak: data time less wall time (e.g. -50m: the samples sent at 02:50 are stamped 02:00, so a run started then crosses the partition boundary at 02:00 data time after 10 minutes); at most 0")
	fs.BoolVar(&c.Reader, "reader", false, "soak: also run a read replica (--mode=reader) on the bucket, through the same faulty store: it is queried during the run, restarted if it exits, and every acknowledged sample is read back from it too once it has caught up with the writer")
	fs.BoolVar(&c.HeapProfile, "heap-profile", false, "soak: save the writer's heap profile (/debug/pprof/heap) as heap-peak.pb.gz under -out whenever its RSS is above that of the last one saved, at most once a minute")
}

// finishSoakFlags checks the soak settings and fills in what depends on
// the duration.
func finishSoakFlags(o *options) error {
	c := &o.soak
	if o.load.Duration == 0 {
		o.load.Duration = 2 * time.Hour
	}
	if c.Kills < 0 {
		c.Kills = max(3, int(math.Round(5*o.load.Duration.Hours()/2)))
	}
	mix, err := parseFaultMix(c.FaultMix)
	if err != nil {
		return err
	}
	c.Faults.Mix, c.Faults.Seed = mix, o.load.Seed
	if _, err := parseOutageMode(c.OutageMode); err != nil {
		return err
	}
	switch {
	case c.DataOffset > 0:
		return fmt.Errorf("-data-offset %s: want at most 0 (samples from the future are refused)", c.DataOffset)
	case c.Faults.Rate < 0 || c.Faults.Rate > 1:
		return fmt.Errorf("-fault-rate %g: want 0..1", c.Faults.Rate)
	case c.Terms < 0:
		return errors.New("-terms must not be negative")
	case c.OutageAt <= 0 || c.OutageAt >= 1:
		return fmt.Errorf("-outage-at %g: want a fraction between 0 and 1", c.OutageAt)
	case c.SampleEvery <= 0 || c.ReadyEvery <= 0 || c.RWTimeout <= 0 || c.ReadWindow < time.Minute:
		return errors.New("-sample-every, -ready-every and -rw-timeout must be positive, -read-window at least 1m")
	}
	_, err = planSchedule(o.load.Duration, c.Kills, c.Terms, c.OutageAt, c.Outage)
	return err
}

// eventKind is a fault the harness causes.
type eventKind int

const (
	evKill eventKind = iota
	evTerm
	evOutageStart
	evOutageEnd
)

// soakEvent is one planned fault, At after the start of the load.
type soakEvent struct {
	At   time.Duration
	Kind eventKind
}

// planSchedule places kills+terms restarts evenly over the run, keeping
// clear of its first and last 5 % and of a guard around the outage
// (outage long from outageAt of d; none when outage is 0), with the SIGTERM
// restarts spread among the SIGKILL ones.
func planSchedule(d time.Duration, kills, terms int, outageAt float64, outage time.Duration) ([]soakEvent, error) {
	type seg struct{ from, to time.Duration }
	lo, hi := d/20, d-d/20
	segs := []seg{{lo, hi}}
	var evs []soakEvent
	if outage > 0 {
		from := time.Duration(float64(d) * outageAt).Round(time.Second)
		to := from + outage
		guard := min(time.Minute, d/20)
		if from < lo || to+guard > hi {
			return nil, fmt.Errorf("an outage of %s at %s does not fit a run of %s", outage, from, d)
		}
		segs = []seg{{lo, from - guard}, {to + guard, hi}}
		evs = append(evs, soakEvent{from, evOutageStart}, soakEvent{to, evOutageEnd})
	}
	var avail time.Duration
	for _, s := range segs {
		avail += max(0, s.to-s.from)
	}
	n := kills + terms
	if n > 0 && avail/time.Duration(n+1) < 10*time.Second {
		return nil, fmt.Errorf("%d restarts do not fit a run of %s: they would be under 10 s apart", n, d)
	}
	isTerm := make([]bool, n)
	for j := range terms {
		i := (j + 1) * n / (terms + 1)
		for isTerm[i] {
			i = (i + 1) % n
		}
		isTerm[i] = true
	}
	for i := range n {
		pos := avail * time.Duration(i+1) / time.Duration(n+1)
		var at time.Duration
		for _, s := range segs {
			if l := max(0, s.to-s.from); pos <= l {
				at = s.from + pos
				break
			} else {
				pos -= l
			}
		}
		k := evKill
		if isTerm[i] {
			k = evTerm
		}
		evs = append(evs, soakEvent{at.Round(time.Second), k})
	}
	sortEvents(evs)
	return evs, nil
}

func sortEvents(evs []soakEvent) {
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].At < evs[j-1].At; j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
}

// soakEventRecord is a fault as it happened.
type soakEventRecord struct {
	Kind  string        // SIGKILL, SIGTERM, outage, unplanned exit, final SIGTERM
	Start time.Duration // the signal, the outage's start, the exit seen
	// Ref is where recovery is measured from: the restart, or the store's
	// return; negative when there was none.
	Ref    time.Duration
	Exit   *procExit
	Took   time.Duration // SIGTERM: time to exit
	Forced bool          // SIGTERM: SIGKILL was needed
	Note   string
}

type readyPoll struct {
	at   time.Duration // since the start, when the poll was sent
	code int32         // HTTP status, -1 without an answer
}

type resSample struct {
	at  time.Duration
	rss float64 // bytes; NaN when no writer ran
	l0  float64 // shale_lsm_l0_tables; NaN when /metrics did not answer
	// cpu is the CPU seconds (user+system) of every writer process so far,
	// summed over restarts; NaN when none could be read yet.
	cpu     float64
	load1   float64 // the machine's 1-minute load average; NaN if unread
	selfRSS float64 // the harness's own RSS in bytes
	// l0Depth is shale_lsm_l0_depth, what stalls writes; NaN when /metrics
	// did not answer or the writer does not export it.
	l0Depth float64
}

type queryPoint struct {
	at, latency time.Duration
	ok          bool
	kind        string // of a failure: queryResult.Kind
}

// soakRun is one soak: its parts and what it recorded.
type soakRun struct {
	o     *options
	sc    soakConfig
	dir   string
	start time.Time // of the load; every recorded time is relative to it

	proxy    *faultProxy
	proc     *shaleProc
	reader   *shaleProc // nil without -reader
	load     *soakLoad
	book     *ackBook
	series   *soakSeries
	schedule []soakEvent

	mu            sync.Mutex
	polls         []readyPoll
	samples       []resSample
	queries       []queryPoint
	firstQueryErr string
	events        []soakEventRecord

	readBack *readBackResult
	// The read replica's: its queries during the load, its read-back, and
	// how long it took to catch up with the writer at the end (-1: it
	// did not within the bound).
	readerQueries       []queryPoint
	firstReaderQueryErr string
	readerReadBack      *readBackResult
	readerCaughtUp      time.Duration
	interrupted         bool
	notes               []string
	elapsed             time.Duration // of the load
	// The proxy's counts at the end of the load (the final restart and
	// the read-back left out), over proxySpan.
	proxyCounts proxyCounts
	proxySpan   time.Duration
	// Bytes in the bucket's folder on versitygw's disk at the end of the
	// load and after the final clean stop (which flushes what the writer
	// held in memory); -1 when not measured.
	storedAtEnd, storedFinal int64
	heapPeak                 string // the last heap profile saved, and when
}

func (r *soakRun) since() time.Duration { return time.Since(r.start) }

func (r *soakRun) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "[soak]", msg)
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
}

func (r *soakRun) addEvent(e soakEventRecord) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return len(r.events) - 1
}

// runSoak runs the fault soak and writes its report under o.out.
func runSoak(ctx context.Context, o *options, stdout io.Writer) error {
	sc := o.soak
	schedule, err := planSchedule(o.load.Duration, sc.Kills, sc.Terms, sc.OutageAt, sc.Outage)
	if err != nil {
		return err
	}
	shaleBin, err := filepath.Abs(o.shaleBin)
	if err == nil {
		_, err = os.Stat(shaleBin)
	}
	if err != nil {
		return fmt.Errorf("shale binary %s (make build): %w", o.shaleBin, err)
	}
	vgw, err := findVersityGW(sc.VersityGW)
	if err != nil {
		return err
	}
	dir := filepath.Join(o.out, "soak")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Everything ends by itself: the load at the duration, the final
	// restart and the read-back within a bound after it.
	ctx, cancel := context.WithTimeout(ctx, o.load.Duration+30*time.Minute)
	defer cancel()

	r := &soakRun{o: o, sc: sc, dir: dir, schedule: schedule, storedAtEnd: -1, storedFinal: -1}
	bucketDir := filepath.Join(dir, "versitygw", "data", "shale-soak")
	fmt.Fprintf(os.Stderr, "[soak] starting versitygw\n")
	s3srv, err := versitygw.Start(ctx, vgw, filepath.Join(dir, "versitygw"))
	if err != nil {
		return err
	}
	defer func() {
		s3srv.Stop()
		if !o.keepData {
			_ = os.RemoveAll(filepath.Join(dir, "versitygw", "data"))
		}
	}()
	const bucket = "shale-soak"
	if err := s3srv.MakeBucket(ctx, bucket); err != nil {
		return err
	}
	quiet := sc.Faults
	quiet.Rate = 0
	r.proxy, err = newFaultProxy(s3srv.Endpoint, quiet, nil)
	if err != nil {
		return err
	}
	proxyURL, stopProxy, err := serveProxy(r.proxy)
	if err != nil {
		return err
	}
	defer stopProxy()
	cfgPath := filepath.Join(dir, "objstore.yml")
	if err := os.WriteFile(cfgPath, []byte(versitygw.ObjstoreYAML(s3srv.S3Config(bucket, proxyURL), "")), 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := append([]string{"--web.listen-address=127.0.0.1:" + fmt.Sprint(port), "--objstore.config-file=" + cfgPath,
		"--storage.retention.time=0", "--log.level=info"}, strings.Fields(o.shaleArgs)...)
	r.proc = newShaleProc(shaleBin, args, base, filepath.Join(dir, "shale.log"))
	defer func() {
		// SIGINT or an error: no writer outlives the harness.
		if ex, _, _, ok := r.proc.signal(syscall.SIGKILL, "SIGKILL", 10*time.Second); ok {
			r.note("killed the writer (pid %d) on the way out", ex.Pid)
		}
	}()

	cfg := o.load
	cfg.Version, cfg.RealTime, cfg.PerSeries, cfg.Churn, cfg.Name = 1, true, 1, 0, "shale-soak"
	gen, err := newGenerator(cfg)
	if err != nil {
		return err
	}
	// The book of a few million series takes a while to lay out: before
	// the writer starts, not into the first steps' time. Its t0 is set
	// when the load starts.
	r.book, r.series = newSoakBook(gen, 0, cfg.Interval, o.load.Seed)
	fmt.Fprintf(os.Stderr, "[soak] starting the writer (log %s)\n", r.proc.logPath)
	if _, err := r.proc.start(); err != nil {
		return err
	}
	if err := r.proc.waitReady(ctx, 5*time.Minute); err != nil {
		return fmt.Errorf("the writer did not become ready (see %s): %w", r.proc.logPath, err)
	}

	var readerBase string
	if sc.Reader {
		rport, err := freePort()
		if err != nil {
			return err
		}
		readerBase = fmt.Sprintf("http://127.0.0.1:%d", rport)
		rargs := []string{"--mode=reader", "--web.listen-address=127.0.0.1:" + fmt.Sprint(rport), "--objstore.config-file=" + cfgPath,
			"--storage.retention.time=0", "--log.level=info"}
		r.reader = newShaleProc(shaleBin, rargs, readerBase, filepath.Join(dir, "reader.log"))
		defer func() {
			if ex, _, _, ok := r.reader.signal(syscall.SIGKILL, "SIGKILL", 10*time.Second); ok {
				r.note("killed the reader (pid %d) on the way out", ex.Pid)
			}
		}()
		fmt.Fprintf(os.Stderr, "[soak] starting the read replica (log %s)\n", r.reader.logPath)
		if _, err := r.reader.start(); err != nil {
			return err
		}
		if err := r.reader.waitReady(ctx, 5*time.Minute); err != nil {
			return fmt.Errorf("the reader did not become ready (see %s): %w", r.reader.logPath, err)
		}
	}

	r.start = time.Now()
	r.proxy.setFaults(sc.Faults)
	t0 := r.start.Truncate(cfg.Interval).Add(cfg.Interval).UnixMilli()
	r.book.t0 = t0 + sc.DataOffset.Milliseconds()
	r.load = newSoakLoad(gen, r.book, r.series, base+"/api/v1/write", r.start, r.start.Add(o.load.Duration), sc.RWTimeout, sc.GiveUp)
	r.load.dataOffset = sc.DataOffset
	r.load.limitInFlight(cfg.Concurrency)
	fmt.Fprintf(os.Stderr, "[soak] %d series in %d requests every %s (at most %d in flight) for %s; %d kills, %d SIGTERM restarts, outage %s (%s) at %s\n",
		gen.activeSeries(), len(gen.shards), cfg.Interval, cfg.Concurrency, o.load.Duration, sc.Kills, sc.Terms, sc.Outage, sc.OutageMode,
		time.Duration(float64(o.load.Duration)*sc.OutageAt).Round(time.Second))

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	monCtx, stopMon := context.WithCancel(ctx)
	defer stopMon()
	var loadWG, monWG sync.WaitGroup
	loadWG.Go(func() { r.load.run(loadCtx) })
	loadWG.Go(func() { r.queryLoop(loadCtx, base, cfg.Interval, &r.queries, &r.firstQueryErr) })
	if r.reader != nil {
		loadWG.Go(func() { r.queryLoop(loadCtx, readerBase, cfg.Interval, &r.readerQueries, &r.firstReaderQueryErr) })
		monWG.Go(func() { r.superviseReader(monCtx) })
	}
	monWG.Go(func() { r.pollReady(monCtx, base) })
	monWG.Go(func() { r.sampleResources(monCtx, base) })
	defer func() { stopLoad(); loadWG.Wait(); stopMon(); monWG.Wait() }()

	r.eventLoop(ctx)
	r.elapsed = r.since()
	r.proxyCounts, r.proxySpan = r.proxy.snapshot(), time.Since(r.proxy.start)
	if n, err := dirBytes(bucketDir); err == nil {
		r.storedAtEnd = n
	}

	stopLoad()
	loadWG.Wait()
	if !r.interrupted {
		r.finalPhase(ctx, bucketDir)
	}
	stopMon()
	monWG.Wait()
	return r.writeReport(stdout)
}

// eventLoop carries out the schedule and restarts a writer that exited on
// its own, until the duration is over or ctx ends.
func (r *soakRun) eventLoop(ctx context.Context) {
	mode, _ := parseOutageMode(r.sc.OutageMode)
	deadline := time.NewTimer(r.o.load.Duration)
	defer deadline.Stop()
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	next := 0
	outageIdx := -1
	var restartC <-chan time.Time
	restartDelay := time.Second
	pendingIdx := -1 // event of the unplanned exit awaiting a restart
	for {
		var evC <-chan time.Time
		if next < len(r.schedule) {
			evC = time.After(time.Until(r.start.Add(r.schedule[next].At)))
		}
		select {
		case <-ctx.Done():
			r.interrupted = true
			r.note("interrupted after %s: %v", r.since().Round(time.Second), context.Cause(ctx))
			return
		case <-deadline.C:
			return
		case <-progress.C:
			r.progress()
		case <-evC:
			ev := r.schedule[next]
			next++
			switch ev.Kind {
			case evKill, evTerm:
				if running, _ := r.proc.running(); !running && ev.At < r.o.load.Duration-r.o.load.Duration/20-10*time.Second {
					// The writer is down after an exit of its own: kill it
					// once it is back.
					r.note("%s at %s postponed by 10s: no writer running", restartName(ev.Kind), r.since().Round(time.Second))
					ev.At += 10 * time.Second
					r.schedule = append(r.schedule, ev)
					sortEvents(r.schedule[next:])
					continue
				}
				r.restart(ev.Kind)
			case evOutageStart:
				r.proxy.startOutage(mode)
				outageIdx = r.addEvent(soakEventRecord{Kind: "outage (" + mode.String() + ")", Start: r.since(), Ref: -1})
				r.note("store away (%s) at %s", mode, r.since().Round(time.Second))
			case evOutageEnd:
				r.proxy.endOutage()
				r.mu.Lock()
				if outageIdx >= 0 {
					r.events[outageIdx].Ref = r.since()
				}
				r.mu.Unlock()
				r.note("store back at %s", r.since().Round(time.Second))
			}
		case ex := <-r.proc.unplanned:
			up := ex.At.Sub(ex.Started)
			idx := r.addEvent(soakEventRecord{Kind: "unplanned exit", Start: ex.At.Sub(r.start), Ref: -1, Exit: &ex})
			r.note("the writer (start %d, pid %d) exited on its own after %s: %s; %s", ex.Gen, ex.Pid,
				up.Round(time.Second), ex.status(), ex.LastError)
			if _, gen := r.proc.running(); gen == ex.Gen && restartC == nil {
				restartDelay = nextRestartDelay(restartDelay, up)
				restartC, pendingIdx = time.After(restartDelay), idx
			}
		case <-restartC:
			restartC = nil
			if running, _ := r.proc.running(); running {
				continue
			}
			if r.startAgain(r.proc, pendingIdx) == nil {
				r.note("restarted the writer at %s", r.since().Round(time.Second))
			}
		}
	}
}

// restart kills (SIGKILL) or stops (SIGTERM) the writer and starts it
// again at once on the same bucket.
func (r *soakRun) restart(k eventKind) {
	sig, name, wait := syscall.SIGKILL, restartName(k), 10*time.Second
	if k == evTerm {
		sig, wait = syscall.SIGTERM, 2*time.Minute
	}
	startAt := r.since()
	ex, took, forced, ok := r.proc.signal(sig, name, wait)
	if !ok {
		r.addEvent(soakEventRecord{Kind: name, Start: startAt, Ref: -1, Note: "skipped: no writer running"})
		r.note("%s at %s skipped: no writer running", name, startAt.Round(time.Second))
		return
	}
	e := soakEventRecord{Kind: name, Start: startAt, Ref: -1, Exit: &ex, Took: took, Forced: forced}
	if at, err := r.proc.start(); err != nil {
		e.Note = "restart failed: " + err.Error()
	} else {
		e.Ref = at.Sub(r.start)
	}
	r.addEvent(e)
	r.note("%s at %s: %s after %s%s; restarted", name, startAt.Round(time.Second), ex.status(), took.Round(time.Millisecond),
		map[bool]string{true: " (needed SIGKILL)", false: ""}[forced])
}

func restartName(k eventKind) string {
	if k == evTerm {
		return "SIGTERM"
	}
	return "SIGKILL"
}

func (r *soakRun) progress() {
	_, acked, _ := r.book.totals()
	attempts, _, _, _ := r.load.snapshot()
	var bad int
	for _, a := range attempts {
		if a.status/100 != 2 {
			bad++
		}
	}
	c := r.proxy.snapshot()
	var faults int64
	for k := faultSlowDown; k < numFaultKinds; k++ {
		faults += c.Faults[k]
	}
	_, gen := r.proc.running()
	fmt.Fprintf(os.Stderr, "[soak] %s/%s  requests acknowledged %d  failed attempts %d  store faults %d  writer start %d\n",
		r.since().Round(time.Second), r.o.load.Duration, acked, bad, faults, gen)
}

// finalPhase turns the faults off, restarts the writer cleanly and reads
// every acknowledged sample back.
func (r *soakRun) finalPhase(ctx context.Context, bucketDir string) {
	r.proxy.endOutage()
	quiet := r.sc.Faults
	quiet.Rate = 0
	r.proxy.setFaults(quiet)
	// A writer that exited on its own and was not restarted yet.
	select {
	case ex := <-r.proc.unplanned:
		r.addEvent(soakEventRecord{Kind: "unplanned exit", Start: ex.At.Sub(r.start), Ref: -1, Exit: &ex, Note: "at the end"})
	default:
	}
	startAt := r.since()
	e := soakEventRecord{Kind: "final SIGTERM", Start: startAt, Ref: -1}
	if ex, took, forced, ok := r.proc.signal(syscall.SIGTERM, "SIGTERM", 2*time.Minute); ok {
		e.Exit, e.Took, e.Forced = &ex, took, forced
	} else {
		e.Note = "no writer was running"
	}
	if n, err := dirBytes(bucketDir); err == nil {
		r.storedFinal = n
	}
	if r.sc.ReadBackShards == 0 {
		r.addEvent(e)
		r.note("read-back skipped (-read-back-shards=0)")
		return
	}
	at, err := r.proc.start()
	if err != nil {
		e.Note = "restart failed: " + err.Error()
		r.addEvent(e)
		return
	}
	e.Ref = at.Sub(r.start)
	r.addEvent(e)
	fmt.Fprintf(os.Stderr, "[soak] final restart, waiting for /-/ready\n")
	if err := r.proc.waitReady(ctx, 5*time.Minute); err != nil {
		r.note("read-back skipped: %v", err)
		return
	}
	shards := pickShards(len(r.book.shards), r.sc.ReadBackShards)
	fmt.Fprintf(os.Stderr, "[soak] reading every acknowledged sample of %d of the %d shards back\n", len(shards), len(r.book.shards))
	client := &http.Client{Timeout: 2 * time.Minute}
	t0 := time.Now()
	r.readBack = readBack(ctx, r.book, r.series, apiQuery(client, r.proc.base), r.sc.ReadWindow, r.start, time.Second, shards)
	r.readBack.Took = time.Since(t0)
	if r.reader != nil {
		r.readBackReader(ctx, client, shards)
	}
	client.CloseIdleConnections()
	ex, took, forced, ok := r.proc.signal(syscall.SIGTERM, "SIGTERM", 2*time.Minute)
	if ok {
		r.addEvent(soakEventRecord{Kind: "stop after read-back", Start: r.since() - took, Ref: -1, Exit: &ex, Took: took, Forced: forced})
	}
}

// queryLoop runs the query set against base round after round until ctx
// ends, recording each query in points and the first error in firstErr.
func (r *soakRun) queryLoop(ctx context.Context, base string, interval time.Duration, points *[]queryPoint, firstErr *string) {
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	qs := querySet()
	for ctx.Err() == nil {
		for _, q := range qs {
			if ctx.Err() != nil {
				return
			}
			res := runQuery(ctx, client, base, q, time.Now().Add(r.sc.DataOffset), interval)
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			*points = append(*points, queryPoint{at: r.since(), latency: res.Latency, ok: res.Err == "", kind: res.Kind})
			if res.Err != "" && *firstErr == "" {
				*firstErr = q.Name + ": " + res.Err
			}
			r.mu.Unlock()
		}
		if !sleepCtx(ctx, r.sc.QueryPause) {
			return
		}
	}
}

// pollReady polls /-/ready every ReadyEvery until ctx ends.
func (r *soakRun) pollReady(ctx context.Context, base string) {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tk := time.NewTicker(r.sc.ReadyEvery)
	defer tk.Stop()
	for {
		at := r.since()
		code := getStatus(ctx, client, base+"/-/ready")
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.polls = append(r.polls, readyPoll{at: at, code: int32(code)})
		r.mu.Unlock()
		select {
		case <-tk.C:
		case <-ctx.Done():
			return
		}
	}
}

// sampleResources samples the writer's RSS and L0 every SampleEvery.
func (r *soakRun) sampleResources(ctx context.Context, base string) {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	tk := time.NewTicker(r.sc.SampleEvery)
	defer tk.Stop()
	cpuByPid := map[int]float64{} // the last CPU seconds read of each writer process
	var profiled float64          // the writer's RSS at the last heap profile
	var lastProfile time.Time
	for {
		s := resSample{at: r.since(), rss: math.NaN(), l0: math.NaN(), l0Depth: math.NaN(), cpu: math.NaN(), load1: loadAverage()}
		if pid := r.proc.pid(); pid > 0 {
			if rss, _, err := procMemory(pid); err == nil {
				s.rss = float64(rss)
			}
			if c, err := procCPUSeconds(pid); err == nil {
				cpuByPid[pid] = c
			}
		}
		if len(cpuByPid) > 0 {
			s.cpu = 0
			for _, c := range cpuByPid {
				s.cpu += c
			}
		}
		if rss, _, err := procMemory(os.Getpid()); err == nil {
			s.selfRSS = float64(rss)
		}
		if r.sc.HeapProfile && s.rss > profiled && time.Since(lastProfile) >= time.Minute {
			lastProfile, profiled = time.Now(), s.rss
			if err := saveHeapProfile(ctx, base, filepath.Join(r.o.out, "heap-peak.pb.gz")); err == nil {
				r.mu.Lock()
				r.heapPeak = fmt.Sprintf("heap-peak.pb.gz, taken at %s with the writer's RSS at %.0f MiB", fmtAt(s.at), s.rss/(1<<20))
				r.mu.Unlock()
			}
		}
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil); err == nil {
			if resp, err := client.Do(req); err == nil {
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode == http.StatusOK {
					if v, ok := sumMetric(bytes.NewReader(body), "shale_lsm_l0_tables"); ok {
						s.l0 = v
					}
					if v, ok := sumMetric(bytes.NewReader(body), "shale_lsm_l0_depth"); ok {
						s.l0Depth = v
					}
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
		select {
		case <-tk.C:
		case <-ctx.Done():
			return
		}
	}
}

// loadAverage returns the machine's 1-minute load average from
// /proc/loadavg, NaN when it cannot be read.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// dirBytes returns the total size of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// saveHeapProfile writes the writer's /debug/pprof/heap to path, through a
// temporary file so that a failed fetch leaves the previous one.
func saveHeapProfile(ctx context.Context, base, path string) error {
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/pprof/heap", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// pickShards returns the indexes of want of n shards spread evenly, the
// first and the last included; all of them when want is negative or at
// least n.
func pickShards(n, want int) []int {
	if want < 0 || want >= n {
		want = n
	}
	out := make([]int, 0, want)
	for i := range want {
		if want == 1 {
			out = append(out, 0)
			break
		}
		out = append(out, i*(n-1)/(want-1))
	}
	return out
}

// readerUnplanned is the event kind of a read replica's exit the harness
// did not cause.
const readerUnplanned = "reader unplanned exit"

// superviseReader records every exit of the read replica the harness did
// not cause and starts it again, after a pause that doubles while it keeps
// exiting within 30 s of its start, until ctx ends.
func (r *soakRun) superviseReader(ctx context.Context) {
	delay := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case ex := <-r.reader.unplanned:
			up := ex.At.Sub(ex.Started)
			idx := r.addEvent(soakEventRecord{Kind: readerUnplanned, Start: ex.At.Sub(r.start), Ref: -1, Exit: &ex})
			r.note("the reader (start %d, pid %d) exited on its own after %s: %s; %s", ex.Gen, ex.Pid, up.Round(time.Second), ex.status(), ex.LastError)
			delay = nextRestartDelay(delay, up)
			if !sleepCtx(ctx, delay) {
				return
			}
			_ = r.startAgain(r.reader, idx) // a failure is in the event's note
		}
	}
}

// nextRestartDelay is the pause before starting again a process that
// exited on its own after running for up: it doubles from prev, up to 30 s,
// while the process keeps exiting within 30 s of its start, and is a second
// after a longer run.
func nextRestartDelay(prev, up time.Duration) time.Duration {
	if up < 30*time.Second {
		return min(2*prev, 30*time.Second)
	}
	return time.Second
}

// startAgain starts p after an exit recorded as event idx, and records on
// the event when it started again, or why it could not.
func (r *soakRun) startAgain(p *shaleProc, idx int) error {
	at, err := p.start()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.events[idx].Note = "restart failed: " + err.Error()
	} else {
		r.events[idx].Ref = at.Sub(r.start)
	}
	return err
}

// readBackReader waits, up to two minutes, until the read replica has read
// every write the writer has made (its last sequence number), then reads
// the shards back from it as from the writer, and stops it.
func (r *soakRun) readBackReader(ctx context.Context, client *http.Client, shards []int) {
	if err := r.reader.waitReady(ctx, 2*time.Minute); err != nil {
		r.note("reader read-back skipped: %v", err)
		return
	}
	t0 := time.Now()
	r.readerCaughtUp = -1
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var writerSeq, readerSeq uint64
	for time.Since(t0) < 2*time.Minute {
		var werr, rerr error
		writerSeq, werr = lastSeq(ctx, client, r.proc.base)
		readerSeq, rerr = lastSeq(ctx, client, r.reader.base)
		if werr == nil && rerr == nil && readerSeq >= writerSeq {
			r.readerCaughtUp = time.Since(t0)
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	if r.readerCaughtUp < 0 {
		r.note("the reader had not caught up after 2m (its last sequence number %d, the writer's %d); reading it back all the same", readerSeq, writerSeq)
	}
	fmt.Fprintf(os.Stderr, "[soak] reading the same shards back from the read replica\n")
	t1 := time.Now()
	r.readerReadBack = readBack(ctx, r.book, r.series, apiQuery(client, r.reader.base), r.sc.ReadWindow, r.start, time.Second, shards)
	r.readerReadBack.Took = time.Since(t1)
	if ex, took, forced, ok := r.reader.signal(syscall.SIGTERM, "SIGTERM", 2*time.Minute); ok {
		r.addEvent(soakEventRecord{Kind: "reader stop", Start: r.since() - took, Ref: -1, Exit: &ex, Took: took, Forced: forced})
	}
}

// lastSeq returns the last sequence number a Shale process has applied
// (/api/v1/status/storage).
func lastSeq(ctx context.Context, client *http.Client, base string) (uint64, error) {
	var st struct {
		Data struct {
			LastSeq uint64 `json:"lastSeq"`
		} `json:"data"`
	}
	if err := fetchJSON(ctx, client, http.MethodGet, base+"/api/v1/status/storage", &st); err != nil {
		return 0, err
	}
	return st.Data.LastSeq, nil
}

// fetchJSON sends a request without a body to url and decodes the JSON of
// its answer into v; an answer with a status other than 200 is an error
// that quotes its start.
func fetchJSON(ctx context.Context, client *http.Client, method, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("%s %s: HTTP %d: %s", method, req.URL.Path, resp.StatusCode, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", method, req.URL.Path, err)
	}
	return nil
}
