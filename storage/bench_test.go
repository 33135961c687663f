package storage

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/shaledb/shale/internal/cputime"
	"github.com/shaledb/shale/storage/objstore"
)

// Benchmarks of the time-series engine. Run with, e.g.:
//
//	go test -run '^$' -bench . -benchtime 1x -count 6 ./storage/ | tee new.txt
//	benchstat new.txt

const realBlockDir = "../../shared/testdata/prom-block-real/01M8NF78WK30D3KCQ6QM04Q6JC"

type realSeries struct {
	lset labels.Labels
	ts   []int64
	vs   []float64
}

var (
	realOnce sync.Once
	realData []realSeries
	realErr  error
)

// loadRealBlock reads every series of the real Prometheus block in testdata.
func loadRealBlock(b *testing.B) []realSeries {
	b.Helper()
	realOnce.Do(func() {
		if _, err := os.Stat(realBlockDir); err != nil {
			realErr = err
			return
		}
		blk, err := tsdb.OpenBlock(nil, realBlockDir, chunkenc.NewPool(), nil)
		if err != nil {
			realErr = err
			return
		}
		defer blk.Close()
		q, err := tsdb.NewBlockQuerier(blk, math.MinInt64, math.MaxInt64)
		if err != nil {
			realErr = err
			return
		}
		defer q.Close()
		ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
		var it chunkenc.Iterator
		for ss.Next() {
			s := realSeries{lset: ss.At().Labels()}
			it = ss.At().Iterator(it)
			for it.Next() == chunkenc.ValFloat {
				t, v := it.At()
				s.ts = append(s.ts, t)
				s.vs = append(s.vs, v)
			}
			realData = append(realData, s)
		}
		realErr = ss.Err()
	})
	if realErr != nil {
		b.Skipf("real data set (../shared/testdata) not readable: %v", realErr)
	}
	return realData
}

// BenchmarkStoredBytesReal writes the real data set the way remote write
// delivers it (one sample of every series per scrape), flushes, closes every
// partition and compacts the LSM, then reports the object-store bytes per
// sample, index included. The peer figure: Prometheus' own block of the same
// data is 1.295 bytes/sample (chunks + index), see ../shared/testdata/README.
func BenchmarkStoredBytesReal(b *testing.B) {
	data := loadRealBlock(b)
	total := 0
	maxLen := 0
	for _, s := range data {
		total += len(s.ts)
		maxLen = max(maxLen, len(s.ts))
	}
	for b.Loop() {
		bucket := objstore.NewMemoryBucket()
		opts := DefaultOptions()
		opts.Retention = 0
		lopts := testLSMOptions()
		lopts.L0CompactionTrigger = 1         // Compact below merges everything into one run
		lopts.GCGracePeriod = time.Nanosecond // no reader to protect: collect replaced tables at once
		db, err := openOn(context.Background(), bucket, "tsdb", opts, lopts, nil, Components{})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		// Scrape by scrape, as a remote-write sender delivers them.
		for i := range maxLen {
			app := db.Appender(context.Background())
			for _, s := range data {
				if i < len(s.ts) {
					if _, err := app.Append(0, s.lset, s.ts[i], s.vs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		ingest := time.Since(start)
		if err := db.flushHead(context.Background(), closeAll); err != nil {
			b.Fatal(err)
		}
		if err := db.w.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := db.w.Compact(context.Background()); err != nil {
			b.Fatal(err)
		}
		if _, err := db.w.CollectGarbage(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		stored := tableBytes(b, bucket)
		b.ReportMetric(float64(stored)/float64(total), "bytes/sample")
		b.ReportMetric(float64(stored), "stored-bytes")
		b.ReportMetric(float64(total)/ingest.Seconds(), "samples/s")
	}
}

// tableBytes is the size of every object of the bucket but WAL objects
// (which garbage collection removes after its grace period).
func tableBytes(b *testing.B, bucket *objstore.MemoryBucket) int64 {
	b.Helper()
	var n int64
	err := objstore.Iter(context.Background(), bucket, "", func(a objstore.Attributes) error {
		if !containsSegment(a.Name, "wal") {
			n += a.Size
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func containsSegment(name, seg string) bool {
	for i := 0; i+len(seg) <= len(name); i++ {
		if name[i:i+len(seg)] == seg && (i == 0 || name[i-1] == '/') && (i+len(seg) == len(name) || name[i+len(seg)] == '/') {
			return true
		}
	}
	return false
}

// BenchmarkAppend measures committed samples per second into the head with
// node_exporter-like label sets, from 16 concurrent appenders (as a sender's
// remote-write shards), each commit 1000 samples, and the head's memory per
// active series. The CPU figures are of the whole process: cpu-ns/sample
// for samples of existing series, create-cpu-ns/series for the first sample
// of each series (from one appender).
//
//	go test -run '^$' -bench 'BenchmarkAppend/series=1000000/wal=false' -benchtime 5x -count 6 ./storage/
func BenchmarkAppend(b *testing.B) {
	for _, series := range []int{10_000, 100_000, 1_000_000} {
		for _, wal := range []bool{false, true} {
			b.Run(fmt.Sprintf("series=%d/wal=%v", series, wal), func(b *testing.B) {
				benchAppend(b, series, wal)
			})
		}
	}
}

func benchLabels(n int) []labels.Labels {
	out := make([]labels.Labels, n)
	for i := range out {
		// 100 metric names x 4 modes x 8 CPUs per host: every set distinct.
		out[i] = labels.FromStrings(
			"__name__", "node_metric_"+strconv.Itoa(i%100),
			"cpu", strconv.Itoa((i/400)%8),
			"instance", "host-"+strconv.Itoa(i/3200)+":9100",
			"job", "node",
			"mode", []string{"user", "system", "idle", "iowait"}[(i/100)%4],
		)
	}
	return out
}

func benchAppend(b *testing.B, nSeries int, wal bool) {
	opts := DefaultOptions()
	opts.WAL = wal
	opts.Retention = 0
	db := openTestDB(b, objstore.NewMemoryBucket(), opts)
	defer db.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	lsets := benchLabels(nSeries) // counted: the head keeps its own copy, these go
	cpu0 := cputime.Process()
	appendScrape(b, db, lsets, 0, 0, nSeries) // create the series
	createCPU := cputime.Process() - cpu0
	t := int64(15_000)
	samples := 0
	cpu0 = cputime.Process()
	start := time.Now()
	for b.Loop() {
		samples += scrapeConcurrently(b, db, lsets, t)
		t += 15_000
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(samples)/elapsed.Seconds(), "samples/s")
	// CPU time of the process: steadier than wall time on a shared machine.
	b.ReportMetric((cputime.Process()-cpu0).Seconds()*1e9/float64(samples), "cpu-ns/sample")
	b.ReportMetric(createCPU.Seconds()*1e9/float64(nSeries), "create-cpu-ns/series")
	// The head's own memory per active series: after a flush has written
	// the samples out and the LSM has written its memtable to a table.
	if err := db.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := db.w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(nSeries), "head-bytes/series")
}

// appendScrape appends one sample at t to each of lsets[from:to], 1000 a
// commit.
func appendScrape(b *testing.B, db *DB, lsets []labels.Labels, t int64, from, to int) {
	const perCommit = 1000
	for lo := from; lo < to; lo += perCommit {
		app := db.Appender(context.Background())
		for i := lo; i < min(lo+perCommit, to); i++ {
			if _, err := app.Append(0, lsets[i], t, float64(t)); err != nil {
				b.Error(err)
				return
			}
		}
		if err := app.Commit(); err != nil {
			b.Error(err)
			return
		}
	}
}

// scrapeConcurrently appends one sample at t to every series of lsets from
// 16 appenders at once (a sender's remote-write shards), each a sixteenth of
// the series; it returns the samples appended.
func scrapeConcurrently(b *testing.B, db *DB, lsets []labels.Labels, t int64) int {
	const writers = 16
	share := len(lsets) / writers
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() { appendScrape(b, db, lsets, t, w*share, (w+1)*share) })
	}
	wg.Wait()
	return writers * share
}

// BenchmarkNewPartition measures what a partition boundary costs: every
// active series receives its first sample of a new partition at once, from
// 16 concurrent appenders of 1000 samples a commit (as a sender's shards do
// when the scrape time crosses into the next partition), with the WAL on, so
// that each series is created and recorded again. series/s is wall time,
// create-cpu-ns/series the whole process's CPU per series created.
//
//	go test -run '^$' -bench 'BenchmarkNewPartition' -benchtime 3x -count 6 ./storage/
func BenchmarkNewPartition(b *testing.B) {
	for _, series := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			lsets := benchLabels(series)
			opts := DefaultOptions()
			opts.Retention = 0
			db := openTestDB(b, objstore.NewMemoryBucket(), opts)
			defer db.Close()
			part := opts.PartitionDuration.Milliseconds()
			scrapeConcurrently(b, db, lsets, 0)
			n := 0
			t := part
			cpu0 := cputime.Process()
			start := time.Now()
			for b.Loop() {
				scrapeConcurrently(b, db, lsets, t)
				n++
				t += part
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(n*series)/elapsed.Seconds(), "series/s")
			b.ReportMetric((cputime.Process()-cpu0).Seconds()*1e9/float64(n*series), "create-cpu-ns/series")
		})
	}
}

// BenchmarkSelect measures a query of N series over a time range, with the
// data in the LSM (closed partitions) and its blocks cached.
func BenchmarkSelect(b *testing.B) {
	for _, span := range []time.Duration{time.Hour, 24 * time.Hour} {
		for _, n := range []int{1, 100, 1000, 10_000} {
			b.Run(fmt.Sprintf("range=%s/series=%d", span, n), func(b *testing.B) {
				benchSelect(b, n, span)
			})
		}
	}
}

func benchSelect(b *testing.B, n int, span time.Duration) {
	end := span.Milliseconds()
	// 30 s scrapes keep the set-up quick.
	db := closedBenchDB(b, n, end, 30_000, func(int, int64) bool { return true })
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "bench_metric")
	samples := 0
	for b.Loop() {
		q, _ := db.Querier(0, end)
		ss := q.Select(context.Background(), false, nil, m)
		var it chunkenc.Iterator
		samples = 0
		for ss.Next() {
			it = ss.At().Iterator(it)
			for it.Next() != chunkenc.ValNone {
				samples++
			}
		}
		if ss.Err() != nil {
			b.Fatal(ss.Err())
		}
	}
	b.ReportMetric(float64(samples), "samples/op")
}

// closedBenchDB opens a DB on a memory bucket (closed when b ends) with n
// series of bench_metric, each with a sample every step from 0 to last that
// write keeps, written out into closed partitions.
func closedBenchDB(b *testing.B, n int, last, step int64, write func(i int, t int64) bool) *DB {
	opts := DefaultOptions()
	opts.Retention = 0
	opts.OutOfOrderWindow = 0
	db := openTestDB(b, objstore.NewMemoryBucket(), opts)
	b.Cleanup(func() { _ = db.Close() })
	lsets := make([]labels.Labels, n)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "bench_metric", "instance", "host-"+strconv.Itoa(i), "job", "bench")
	}
	for t := int64(0); t <= last; t += step {
		app := db.Appender(context.Background())
		for i, l := range lsets {
			if !write(i, t) {
				continue
			}
			if _, err := app.Append(0, l, t, float64(t%1000)); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.flushHead(context.Background(), closeAll); err != nil {
		b.Fatal(err)
	}
	return db
}

// BenchmarkHeadStats measures /api/v1/status/tsdb's statistics of a head
// that holds two partitions with the same series, as it does for a while
// after every partition boundary: 100k series each (SHALE_BENCH_SERIES sets
// the count).
//
//	go test -run '^$' -bench BenchmarkHeadStats -benchmem ./storage/
func BenchmarkHeadStats(b *testing.B) {
	n := benchSeries(b, 100_000, 1)
	opts := DefaultOptions()
	opts.PartitionDuration = time.Hour
	db, _ := openMemDB(b, opts)
	hour := time.Hour.Milliseconds()
	for _, t := range []int64{hour - 1000, hour + 1000} {
		app := db.Appender(context.Background())
		for i := range n {
			lset := labels.FromStrings("__name__", "node_cpu_seconds_total", "instance", "host-"+strconv.Itoa(i/16), "cpu", strconv.Itoa(i%16/4), "mode", strconv.Itoa(i%4))
			if _, err := app.Append(0, lset, t, 1); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		st, _, _, ok := db.HeadStats(10)
		if !ok || st.NumSeries != uint64(n) {
			b.Fatalf("%d series, want %d", st.NumSeries, n)
		}
	}
}

// BenchmarkFlush measures a head flush of every active series holding 30
// samples, its encoding done by one goroutine or by cutWorkers: ms/flush is
// wall time (what a shutdown waits for), cpu-ms/flush the process' CPU.
//
//	go test -run '^$' -bench 'BenchmarkFlush' -benchtime 3x -count 6 ./storage/
func BenchmarkFlush(b *testing.B) {
	for _, series := range []int{100_000, 1_000_000} {
		for _, workers := range []int{1, maxCutWorkers} {
			b.Run(fmt.Sprintf("series=%d/workers=%d", series, min(workers, runtime.GOMAXPROCS(0))), func(b *testing.B) {
				defer func(n int) { maxCutWorkers = n }(maxCutWorkers)
				maxCutWorkers = workers
				benchFlush(b, series)
			})
		}
	}
}

func benchFlush(b *testing.B, nSeries int) {
	opts := DefaultOptions()
	opts.WAL = false
	opts.Retention = 0
	opts.HeadFlushSamples = 0 // only the flushes measured
	db := openTestDB(b, objstore.NewMemoryBucket(), opts)
	defer db.Close()
	lsets := benchLabels(nSeries)
	t := int64(0)
	var (
		wall, cpu time.Duration
		flushes   int
	)
	for b.Loop() {
		b.StopTimer()
		for range 30 {
			scrapeConcurrently(b, db, lsets, t)
			t += 15_000
		}
		b.StartTimer()
		cpu0, start := cputime.Process(), time.Now()
		if err := db.flushHead(context.Background(), closeNone); err != nil {
			b.Fatal(err)
		}
		wall += time.Since(start)
		cpu += cputime.Process() - cpu0
		flushes++
	}
	b.ReportMetric(float64(wall.Milliseconds())/float64(flushes), "ms/flush")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(flushes), "cpu-ms/flush")
}

// BenchmarkSortByLabels sorts series selected in no order by labels, as the
// series API asks: through the pointers (compare) and as sortByLabels does.
//
//	go test -run '^$' -bench BenchmarkSortByLabels ./storage/
func BenchmarkSortByLabels(b *testing.B) {
	for _, n := range []int{2000, 20_000, 200_000} {
		rng := rand.New(rand.NewPCG(1, 2))
		var sl slab[qSeries]
		all := make([]*qSeries, n)
		for i := range all {
			s := sl.next()
			s.lset = labels.FromStrings("__name__", fmt.Sprintf("node_metric_%d", i%40), "instance", fmt.Sprintf("host-%05d-a:9100", rng.IntN(5000)),
				"job", "node", "mode", []string{"idle", "user", "system"}[i%3], "i", strconv.Itoa(i))
			all[i] = s
		}
		perm := rng.Perm(n)
		work := make([]*qSeries, n)
		for _, sorter := range []struct {
			name string
			sort func([]*qSeries)
		}{
			{"compare", func(ss []*qSeries) {
				slices.SortFunc(ss, func(a, b *qSeries) int { return labels.Compare(a.lset, b.lset) })
			}},
			{"sortByLabels", sortByLabels},
		} {
			b.Run(fmt.Sprintf("series=%d/%s", n, sorter.name), func(b *testing.B) {
				for b.Loop() {
					for i, p := range perm {
						work[i] = all[p]
					}
					sorter.sort(work)
				}
			})
		}
	}
}

// BenchmarkSeriesAPIClosed measures the series API's select over the last
// hour of a written-out, closed partition of 100k series (SHALE_BENCH_SERIES
// sets the count), half of which stopped in its first half hour: those are
// left out by the partition's stored newest times.
//
//	go test -run '^$' -bench BenchmarkSeriesAPIClosed -benchmem ./storage/
func BenchmarkSeriesAPIClosed(b *testing.B) {
	const minute = 60_000
	db := closedBenchDB(b, benchSeries(b, 100_000, 1), 110*minute, 10*minute, func(i int, t int64) bool {
		return i%2 == 0 || t < 30*minute // the odd ones stopped
	})
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "bench_metric")
	mint, maxt := int64(60*minute), int64(120*minute)
	listed := 0
	for b.Loop() {
		q, _ := db.Querier(mint, maxt)
		ss := q.Select(context.Background(), true, &promstorage.SelectHints{Start: mint, End: maxt, Func: "series"}, m)
		listed = 0
		for ss.Next() {
			listed++
		}
		if ss.Err() != nil {
			b.Fatal(ss.Err())
		}
	}
	b.ReportMetric(float64(listed), "series/op")
}

// benchSeries returns the series count of a benchmark: SHALE_BENCH_SERIES
// if set (no fewer than least), def otherwise.
func benchSeries(b *testing.B, def, least int) int {
	s := os.Getenv("SHALE_BENCH_SERIES")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("SHALE_BENCH_SERIES=%q: want a number >= %d", s, least)
	}
	return n
}
