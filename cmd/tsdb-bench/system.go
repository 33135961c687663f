package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shaledb/shale/internal/proc"
)

// system is one time-series database the harness starts, loads, queries,
// restarts and stops.
type system struct {
	name     string // as shown in the report: shale, shale-rw2, shale-otlp, prometheus, victoria-metrics, null
	kind     string // shale, prometheus, victoria-metrics or null
	version  int    // remote write version the load uses, or versionOTLP
	bin      string
	extra    []string // further flags
	dir      string   // working folder of this system in this run
	dataDir  string   // what "stored bytes" measures
	cacheDir string   // Shale's disk cache tier; emptied for cold queries
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
	logFile  *os.File
	stopNull func()
	nullURL  string
	// startS3, if set, starts the object store the system runs on (s3
	// once started); otherwise Shale uses a local folder.
	startS3 func(ctx context.Context, dir string) (*s3Backend, error)
	s3      *s3Backend
}

// closeBackend stops the system's object store, if it has one.
func (s *system) closeBackend() {
	if s.s3 != nil {
		s.s3.stop()
		s.s3 = nil
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func freePort() (int, error) {
	l, err := listenLoopback()
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *system) base() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

func (s *system) writeURL() string {
	switch {
	case s.kind == "null":
		return s.nullURL
	case s.version == versionOTLP && s.kind == "victoria-metrics":
		return s.base() + "/opentelemetry/v1/metrics"
	case s.version == versionOTLP:
		return s.base() + "/api/v1/otlp/v1/metrics"
	}
	return s.base() + "/api/v1/write"
}

// prepare makes a fresh working folder.
func (s *system) prepare(root string) error {
	s.dir = filepath.Join(root, s.name)
	if err := os.RemoveAll(s.dir); err != nil {
		return err
	}
	s.dataDir = filepath.Join(s.dir, "data")
	s.cacheDir = filepath.Join(s.dir, "disk-cache")
	for _, d := range []string{s.dataDir, s.cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if s.startS3 != nil {
		b, err := s.startS3(context.Background(), s.dir)
		if err != nil {
			return err
		}
		s.s3, s.dataDir = b, b.dataDir
	}
	if s.kind == "prometheus" {
		cfg := "global:\n  scrape_interval: 15s\n"
		if err := os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (s *system) args() []string {
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)
	var a []string
	switch s.kind {
	case "shale":
		store := "--storage.path=" + s.dataDir
		if s.s3 != nil {
			store = "--objstore.config-file=" + s.s3.cfgPath
		}
		a = []string{"--web.listen-address=" + addr, store,
			"--cache.disk-path=" + s.cacheDir, "--storage.retention.time=0", "--log.level=warn"}
	case "prometheus":
		a = []string{"--config.file=" + filepath.Join(s.dir, "prometheus.yml"), "--web.listen-address=" + addr,
			"--storage.tsdb.path=" + s.dataDir, "--web.enable-remote-write-receiver",
			"--storage.tsdb.retention.time=3650d", "--log.level=warn"}
	case "victoria-metrics":
		a = []string{"-httpListenAddr=" + addr, "-storageDataPath=" + s.dataDir, "-retentionPeriod=100y",
			"-loggerLevel=WARN"}
	}
	// A level among the extra arguments replaces the default: the flag
	// parsers refuse a repeated flag.
	if slices.ContainsFunc(s.extra, isLogLevel) {
		a = slices.DeleteFunc(a, isLogLevel)
	}
	return append(a, s.extra...)
}

// isLogLevel reports whether arg sets a system's log level.
func isLogLevel(arg string) bool {
	return strings.HasPrefix(arg, "--log.level=") || strings.HasPrefix(arg, "-loggerLevel=")
}

// start starts the system and waits until it is ready.
func (s *system) start(ctx context.Context) error {
	if s.kind == "null" {
		u, stop, err := nullReceiver()
		if err != nil {
			return err
		}
		s.nullURL, s.stopNull = u, stop
		return nil
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	lf, err := os.OpenFile(filepath.Join(s.dir, "log.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.logFile = lf
	s.cmd = exec.Command(s.bin, s.args()...)
	s.cmd.Stdout, s.cmd.Stderr = lf, lf
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	readyPath := "/-/ready"
	if s.kind == "victoria-metrics" {
		readyPath = "/health"
	}
	if err := s.waitHTTP(ctx, s.base()+readyPath, 5*time.Minute); err != nil {
		s.stop()
		return fmt.Errorf("%s did not become ready (see %s): %w", s.name, lf.Name(), err)
	}
	return nil
}

func (s *system) waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
		}
		select {
		case <-s.done:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, url)
		}
	}
}

// stop ends the process gracefully (SIGTERM; SIGKILL after 2 minutes) so
// that it writes out what it holds, and reports how long that took.
func (s *system) stop() time.Duration {
	if s.kind == "null" {
		if s.stopNull != nil {
			s.stopNull()
		}
		return 0
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	t0 := time.Now()
	proc.Stop(s.cmd.Process, s.done, 2*time.Minute)
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
	s.cmd = nil
	return time.Since(t0)
}

func (s *system) pid() int {
	if s.kind == "null" {
		return os.Getpid()
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// flush makes the newest samples visible to queries where a system buffers
// them (VictoriaMetrics keeps recent rows in memory for up to a second or two).
func (s *system) flush(ctx context.Context) {
	if s.kind != "victoria-metrics" {
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base()+"/internal/force_flush", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// dropCaches empties the caches a system keeps on disk across restarts, so
// the next queries are cold: Shale's disk cache tier and VictoriaMetrics'
// saved rollup-result and index caches. Prometheus keeps none.
func (s *system) dropCaches() error {
	switch s.kind {
	case "shale":
		if err := os.RemoveAll(s.cacheDir); err != nil {
			return err
		}
		return os.MkdirAll(s.cacheDir, 0o755)
	case "victoria-metrics":
		return os.RemoveAll(filepath.Join(s.dataDir, "cache"))
	}
	return nil
}

// storedBytes sums the sizes of the files holding the data: the object-store
// folder for Shale, the TSDB folder (blocks, WAL, head chunks) for
// Prometheus, the storage folder without its cache subfolder for
// VictoriaMetrics.
// wal is what of total lies in the write-ahead log (the top-level "wal"
// folder of Shale's object store and of Prometheus' TSDB).
func (s *system) storedBytes() (total, wal int64, err error) {
	walDir := filepath.Join(s.dataDir, "wal")
	err = filepath.WalkDir(s.dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && s.kind == "victoria-metrics" && p == filepath.Join(s.dataDir, "cache") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
			if strings.HasPrefix(p, walDir+string(filepath.Separator)) {
				wal += fi.Size()
			}
		}
		return nil
	})
	return total, wal, err
}

// procCPUSeconds returns user+system CPU seconds of pid from /proc/<pid>/stat.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func parseProcStat(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no ')' in /proc/<pid>/stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/<pid>/stat has %d fields after the name, want at least 13", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse utime/stime: %w", err)
	}
	return float64(u+st) / clockTicks, nil
}

// procMemory returns VmRSS and VmHWM (peak RSS) of pid in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseProcStatus(f)
}

func parseProcStatus(f interface{ Read([]byte) (int, error) }) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &hwm
		default:
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 2 {
			return 0, 0, fmt.Errorf("malformed line %q", line)
		}
		kb, err := strconv.ParseInt(fs[1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %q: %w", line, err)
		}
		*dst = kb * 1024
	}
	return rss, hwm, sc.Err()
}

// objstoreOps returns the sum of shale_objstore_operations_total over all
// label values from the system's /metrics, or -1 when it has none.
func (s *system) objstoreOps() float64 {
	if s.kind != "shale" {
		return -1
	}
	resp, err := http.Get(s.base() + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	v, ok := sumMetric(resp.Body, "shale_objstore_operations_total")
	if !ok {
		return -1
	}
	return v
}

// sumMetric adds up every sample of metric name in a Prometheus text
// exposition.
func sumMetric(r interface{ Read([]byte) (int, error) }, name string) (float64, bool) {
	return sumMetricWith(r, name, "")
}

// sumMetricWith adds up the samples of metric name whose label set holds
// pair (as exposed, e.g. `result="hit"`); every sample for an empty pair.
func sumMetricWith(r interface{ Read([]byte) (int, error) }, name, pair string) (float64, bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name with this prefix
		}
		if rest[0] == '{' {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			if pair != "" && !hasLabelPair(rest[1:j], pair) {
				continue
			}
			rest = rest[j+1:]
		} else if pair != "" {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// hasLabelPair reports whether the exposed label set ls (without braces)
// holds pair. Label values with commas in them are not expected here.
func hasLabelPair(ls, pair string) bool {
	for _, p := range strings.Split(ls, ",") {
		if strings.TrimSpace(p) == pair {
			return true
		}
	}
	return false
}

// removeKeepingLog removes s's working folder, keeping the system's log (its
// stdout and stderr) as <name>-log.txt under -out when it wrote anything: a
// system that stopped answering in the middle of a run left no trace
// otherwise.
func (o *options) removeKeepingLog(s *system) {
	if b, err := os.ReadFile(filepath.Join(s.dir, "log.txt")); err == nil && len(b) > 0 {
		_ = os.WriteFile(filepath.Join(o.out, s.name+"-log.txt"), b, 0o644)
	}
	_ = os.RemoveAll(s.dir)
}
