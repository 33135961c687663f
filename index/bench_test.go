package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	tsdbindex "github.com/prometheus/prometheus/tsdb/index"

	"github.com/shaledb/shale/internal/cputime"
)

// nodeSeries returns the i-th series of a node_exporter-like fleet: 1000
// series per instance (CPU by mode, filesystems, network and disk devices,
// HTTP paths, and single-series gauges), 10 clusters, two jobs.
func nodeSeries(i int, b *labels.ScratchBuilder) labels.Labels {
	inst, j := i/1000, i%1000
	b.Reset()
	b.Add("instance", "host-"+strconv.Itoa(inst)+":9100")
	b.Add("cluster", "cluster-"+strconv.Itoa(inst%10))
	job := "node"
	if inst%5 == 4 {
		job = "api"
	}
	b.Add("job", job)
	switch {
	case j < 128:
		b.Add("__name__", "node_cpu_seconds_total")
		b.Add("cpu", strconv.Itoa(j/8))
		b.Add("mode", [...]string{"idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice"}[j%8])
	case j < 164:
		k := j - 128
		b.Add("__name__", "node_filesystem_"+[...]string{"avail", "size", "free", "files", "files_free", "readonly"}[k%6]+"_bytes")
		fs := k / 6
		b.Add("device", "/dev/sd"+string(rune('a'+fs)))
		b.Add("fstype", [...]string{"ext4", "xfs", "tmpfs"}[fs%3])
		b.Add("mountpoint", [...]string{"/", "/home", "/var", "/run", "/boot", "/data"}[fs])
	case j < 196:
		k := j - 164
		b.Add("__name__", "node_network_"+[...]string{"receive", "transmit"}[k%2]+"_"+[...]string{"bytes", "packets", "errs", "drop"}[k/2%4]+"_total")
		b.Add("device", [...]string{"eth0", "eth1", "lo", "docker0"}[k/8])
	case j < 236:
		k := j - 196
		b.Add("__name__", "node_disk_metric_"+strconv.Itoa(k%10))
		b.Add("device", [...]string{"sda", "sdb", "nvme0n1", "nvme1n1"}[k/10])
	case j < 356:
		k := j - 236
		b.Add("__name__", "http_requests_total")
		b.Add("path", [...]string{"/api/v1/query", "/api/v1/query_range", "/api/v1/series", "/api/v1/labels", "/api/v1/write",
			"/api/v2/alerts", "/api/v2/silences", "/metrics", "/-/healthy", "/-/ready"}[k%10]+"/"+strconv.Itoa(k/10%2))
		b.Add("method", [...]string{"GET", "POST"}[k/20%2])
		b.Add("code", [...]string{"200", "400", "500"}[k/40])
	default:
		b.Add("__name__", "node_gauge_"+strconv.Itoa(j-356))
	}
	b.Sort()
	return b.Labels()
}

const benchSeries = 1_000_000

var bench1M struct {
	once sync.Once
	ix   *MemIndex
	enc  *encodedReader
	head *tsdb.Head
	dir  string
	err  error
}

// benchIndexes builds the 1M-series MemIndex and, as the peer, a Prometheus
// head holding the same series, once per test binary.
func benchIndexes(b *testing.B) (*MemIndex, *encodedReader, *tsdb.Head) {
	b.Helper()
	bench1M.once.Do(func() {
		ix := NewMemIndex()
		opts := tsdb.DefaultHeadOptions()
		dir, err := os.MkdirTemp("", "shale-index-bench")
		if err != nil {
			bench1M.err = err
			return
		}
		bench1M.dir = dir
		opts.ChunkDirRoot = dir
		head, err := tsdb.NewHead(nil, nil, nil, nil, opts, nil)
		if err != nil {
			bench1M.err = err
			return
		}
		app := head.Appender(context.Background())
		builder := labels.NewScratchBuilder(8)
		for i := range benchSeries {
			lset := nodeSeries(i, &builder)
			ix.GetOrCreate(lset)
			if _, err := app.Append(0, lset, 1000, 1); err != nil {
				bench1M.err = err
				return
			}
		}
		bench1M.err = app.Commit()
		bench1M.ix, bench1M.head = ix, head
		bench1M.enc = newEncodedReader(b, ix)
	})
	if bench1M.err != nil {
		b.Fatal(bench1M.err)
	}
	return bench1M.ix, bench1M.enc, bench1M.head
}

func closeBenchIndexes() {
	if bench1M.head != nil {
		_ = bench1M.head.Close()
	}
	if bench1M.dir != "" {
		_ = os.RemoveAll(bench1M.dir)
	}
}

var dashboardQueries = []struct {
	name string
	ms   []*labels.Matcher
}{
	{"name", ms(eqM("__name__", "node_gauge_7"))},
	{"name_job_instance", ms(eqM("__name__", "node_cpu_seconds_total"), eqM("job", "node"), eqM("instance", "host-17:9100"))},
	{"instance_alternation", ms(eqM("__name__", "node_cpu_seconds_total"), reM("instance", "host-17:9100|host-18:9100|host-19:9100"))},
	{"mode_not_idle", ms(eqM("__name__", "node_cpu_seconds_total"), eqM("instance", "host-17:9100"), neqM("mode", "idle"))},
	{"path_prefix", ms(eqM("__name__", "http_requests_total"), eqM("instance", "host-17:9100"), reM("path", "/api/.*"))},
	{"path_prefix_fleet", ms(eqM("__name__", "http_requests_total"), reM("path", "/api/v1/.*"))},
	{"mountpoint_set", ms(eqM("__name__", "node_filesystem_avail_bytes"), neqM("mountpoint", ""), eqM("cluster", "cluster-3"))},
	{"instance_prefix", ms(eqM("__name__", "node_gauge_15"), reM("instance", "host-12.*"))},
	{"instance_regex", ms(eqM("job", "node"), reM("instance", ".*-12[0-9]:9100"), eqM("__name__", "node_gauge_15"))},
	{"missing_metric", ms(eqM("job", "node"), reM("instance", "host-1.*"), eqM("__name__", "node_load_15"))},
	{"job_only", ms(eqM("job", "api"))},
	{"fstype_not_regex", ms(eqM("__name__", "node_filesystem_size_bytes"), nreM("fstype", "tmpfs|xfs"))},
}

func ms(m ...*labels.Matcher) []*labels.Matcher { return m }
func eqM(n, v string) *labels.Matcher           { return labels.MustNewMatcher(labels.MatchEqual, n, v) }
func neqM(n, v string) *labels.Matcher          { return labels.MustNewMatcher(labels.MatchNotEqual, n, v) }
func reM(n, v string) *labels.Matcher           { return labels.MustNewMatcher(labels.MatchRegexp, n, v) }
func nreM(n, v string) *labels.Matcher          { return labels.MustNewMatcher(labels.MatchNotRegexp, n, v) }

// BenchmarkSelect evaluates dashboard matchers over 1M series, in a MemIndex
// (impl=shale), in a Prometheus head with the same series (impl=prometheus,
// PostingsForMatchers with the postings expanded), and in a reader that
// decodes every postings list and label set it reads from its encoded form,
// as a persisted partition's reader does without its cache (impl=encoded).
//
//	go test -run '^$' -bench 'BenchmarkSelect$' -benchtime 2s ./index/
func BenchmarkSelect(b *testing.B) {
	ix, enc, head := benchIndexes(b)
	ctx := context.Background()
	hir, err := head.Index()
	if err != nil {
		b.Fatal(err)
	}
	defer hir.Close()
	for _, q := range dashboardQueries {
		for _, impl := range []struct {
			name string
			r    Reader
		}{{"shale", ix}, {"encoded", enc}} {
			b.Run("query="+q.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				var n uint64
				for b.Loop() {
					bm, err := Select(ctx, impl.r, q.ms...)
					if err != nil {
						b.Fatal(err)
					}
					n = bm.GetCardinality()
				}
				b.ReportMetric(float64(n), "series")
			})
		}
		b.Run("query="+q.name+"/impl=prometheus", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				p, err := tsdb.PostingsForMatchers(ctx, hir, q.ms...)
				if err != nil {
					b.Fatal(err)
				}
				refs, err := tsdbindex.ExpandPostings(p)
				if err != nil {
					b.Fatal(err)
				}
				n = len(refs)
			}
			b.ReportMetric(float64(n), "series")
		})
	}
}

// BenchmarkGetOrCreate measures the series dictionary: looking up series
// that exist (op=hit from parallel goroutines, op=hit_serial from one) and
// adding new ones (op=create).
//
//	go test -run '^$' -bench 'BenchmarkGetOrCreate$' ./index/
func BenchmarkGetOrCreate(b *testing.B) {
	const n = 100_000
	sets := make([]labels.Labels, n)
	builder := labels.NewScratchBuilder(8)
	for i := range sets {
		sets[i] = nodeSeries(i, &builder)
	}
	b.Run("op=hit", func(b *testing.B) {
		ix := NewMemIndex()
		for _, s := range sets {
			ix.GetOrCreate(s)
		}
		var seed atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(seed.Add(1), 0))
			for pb.Next() {
				if _, created := ix.GetOrCreate(sets[rng.IntN(n)]); created {
					b.Error("created an existing series")
				}
			}
		})
	})
	b.Run("op=hit_serial", func(b *testing.B) {
		ix := NewMemIndex()
		for _, s := range sets {
			ix.GetOrCreate(s)
		}
		rng := rand.New(rand.NewPCG(1, 0))
		b.ReportAllocs()
		for b.Loop() {
			if _, created := ix.GetOrCreate(sets[rng.IntN(n)]); created {
				b.Error("created an existing series")
			}
		}
	})
	b.Run("op=create", func(b *testing.B) {
		b.ReportAllocs()
		ix := NewMemIndex()
		i := 0
		for b.Loop() {
			if i == n {
				b.StopTimer()
				ix, i = NewMemIndex(), 0
				b.StartTimer()
			}
			ix.GetOrCreate(sets[i])
			i++
		}
	})
}

// benchFleet is a fleet of series for the index benchmarks: series returns
// the labels of series i.
type benchFleet struct {
	name   string
	series func(i int, b *labels.ScratchBuilder) labels.Labels
}

// BenchmarkCreate fills an empty index with n series, as a head partition
// fills when a large fleet starts sending, and reports the cost per series
// created. fleet=node is nodeSeries; fleet=labelled gives its single-series
// gauges two labels (collector, item), so that most series of an instance
// are consecutive refs of a label: postings of many runs.
//
//	go test -run '^$' -bench 'BenchmarkCreate$' -benchtime 3x -count 6 ./index/
func BenchmarkCreate(b *testing.B) {
	fleets := []benchFleet{
		{"node", nodeSeries},
		{"labelled", func(i int, b *labels.ScratchBuilder) labels.Labels {
			lset := nodeSeries(i, b)
			if j := i % 1000; j >= 356 {
				lset = labels.NewBuilder(lset).Set("collector", "c"+strconv.Itoa(j%50)).Set("item", strconv.Itoa(j)).Labels()
			}
			return lset
		}},
	}
	for _, fleet := range fleets {
		for _, n := range []int{100_000, 1_000_000} {
			b.Run(fmt.Sprintf("fleet=%s/series=%d", fleet.name, n), func(b *testing.B) {
				sets := make([]labels.Labels, n)
				builder := labels.NewScratchBuilder(8)
				for i := range sets {
					sets[i] = fleet.series(i, &builder)
				}
				b.ReportAllocs()
				cpu0 := cputime.Process()
				for b.Loop() {
					ix := NewMemIndex()
					for _, s := range sets {
						ix.GetOrCreate(s)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/series")
				// CPU time of the process, steadier than wall time on a shared machine.
				b.ReportMetric((cputime.Process()-cpu0).Seconds()*1e9/float64(b.N*n), "cpu-ns/series")
			})
		}
	}
}

// BenchmarkMemIndexBytesPerSeries reports the heap a MemIndex holds per
// series of the node_exporter-like fleet: dictionary, forward index, symbols
// and postings.
//
//	go test -run '^$' -bench 'BenchmarkMemIndexBytesPerSeries$' -benchtime 1x ./index/
func BenchmarkMemIndexBytesPerSeries(b *testing.B) {
	fleets := []benchFleet{
		{"node", nodeSeries},
		// Every series also carries a label whose value no other series has
		// (a request id, a pod uid): the worst case for postings.
		{"unique_label", func(i int, b *labels.ScratchBuilder) labels.Labels {
			lset := nodeSeries(i, b)
			return labels.NewBuilder(lset).Set("uid", strconv.Itoa(i*7919)).Labels()
		}},
	}
	for _, fleet := range fleets {
		for _, n := range []int{100_000, 1_000_000} {
			b.Run(fmt.Sprintf("fleet=%s/series=%d", fleet.name, n), func(b *testing.B) {
				var perSeries float64
				for b.Loop() {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					ix := NewMemIndex()
					builder := labels.NewScratchBuilder(8)
					for i := range n {
						ix.GetOrCreate(fleet.series(i, &builder))
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					perSeries = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
					runtime.KeepAlive(ix)
				}
				b.ReportMetric(perSeries, "bytes/series")
			})
		}
	}
}

// BenchmarkEncodedSize reports what a partition of the node_exporter-like
// fleet takes in the encodings of this package: label sets as written
// (format=plain) against symbol ids into a per-partition table
// (format=symbols, the table's bytes spread over the series), each raw and
// zstd-compressed in 4 KiB blocks as an SST would store them; and postings.
//
//	go test -run '^$' -bench 'BenchmarkEncodedSize$' -benchtime 1x ./index/
func BenchmarkEncodedSize(b *testing.B) {
	const n = 100_000
	ix := NewMemIndex()
	builder := labels.NewScratchBuilder(8)
	for i := range n {
		ix.GetOrCreate(nodeSeries(i, &builder))
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	blocked := func(records [][]byte) int {
		total, block := 0, []byte(nil)
		for _, r := range records {
			block = append(block, r...)
			if len(block) >= 4096 {
				total += len(enc.EncodeAll(block, nil))
				block = block[:0]
			}
		}
		if len(block) > 0 {
			total += len(enc.EncodeAll(block, nil))
		}
		return total
	}
	b.Run("what=labels/format=plain", func(b *testing.B) {
		var raw, compressed int
		for b.Loop() {
			var recs [][]byte
			raw = 0
			_ = ix.ForEachSeries(0, func(_ uint32, lset labels.Labels) error {
				r := EncodeLabels(nil, lset)
				raw += len(r)
				recs = append(recs, r)
				return nil
			})
			compressed = blocked(recs)
		}
		b.ReportMetric(float64(raw)/n, "bytes/series")
		b.ReportMetric(float64(compressed)/n, "zstd-bytes/series")
	})
	b.Run("what=labels/format=symbols", func(b *testing.B) {
		var raw, compressed int
		for b.Loop() {
			syms := map[string]uint64{}
			var table []byte
			id := func(s string) uint64 {
				if v, ok := syms[s]; ok {
					return v
				}
				syms[s] = uint64(len(syms))
				table = binary.AppendUvarint(table, uint64(len(s)))
				table = append(table, s...)
				return syms[s]
			}
			var recs [][]byte
			raw = 0
			_ = ix.ForEachSeries(0, func(_ uint32, lset labels.Labels) error {
				r := binary.AppendUvarint(nil, uint64(lset.Len()))
				lset.Range(func(l labels.Label) {
					r = binary.AppendUvarint(r, id(l.Name))
					r = binary.AppendUvarint(r, id(l.Value))
				})
				raw += len(r)
				recs = append(recs, r)
				return nil
			})
			raw += len(table)
			compressed = blocked(recs) + len(enc.EncodeAll(table, nil))
		}
		b.ReportMetric(float64(raw)/n, "bytes/series")
		b.ReportMetric(float64(compressed)/n, "zstd-bytes/series")
	})
	b.Run("what=postings", func(b *testing.B) {
		var total, pairs int
		for b.Loop() {
			total, pairs = 0, 0
			_ = ix.ForEachPostings(0, func(_, _ string, bm *roaring.Bitmap) error {
				total += len(EncodePostings(nil, bm))
				pairs++
				return nil
			})
		}
		b.ReportMetric(float64(total)/n, "bytes/series")
		b.ReportMetric(float64(pairs), "pairs")
	})
}

// BenchmarkEqualEach measures the check that a batch of series found by
// their labels hash has those labels (the head's lookup of a remote-write
// request's series): batches of 128 consecutive series, as a sender's shard
// sends them, from 16 places in the index in turn. Each batch's labels are
// hashed first, as the lookup does (which brings them into the CPU's cache,
// as a request just decoded is), and the hashing is in the figures.
// ns/series is per series checked.
//
//	go test -run '^$' -bench 'BenchmarkEqualEach$' -count 8 ./index/
func BenchmarkEqualEach(b *testing.B) {
	const batch, senders = 128, 16
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			ix := NewMemIndex()
			builder := labels.NewScratchBuilder(8)
			all := make([]labels.Labels, n)
			for i := range n {
				all[i] = nodeSeries(i, &builder)
				ix.Add(all[i])
			}
			refs := make([]int64, batch)
			next := make([]int, senders)
			for s := range next {
				next[s] = s * (n / senders)
			}
			var sink uint64
			checked := 0
			for i := 0; b.Loop(); i++ {
				s := i % senders
				lo := next[s]
				next[s] = (lo + batch) % (n - batch)
				lsets := all[lo : lo+batch]
				for j, lset := range lsets {
					sink += lset.Hash()
					refs[j] = int64(lo + j)
				}
				ix.EqualEach(refs, lsets)
				for _, r := range refs {
					if r < 0 {
						b.Fatal("a series does not have its own labels")
					}
				}
				checked += batch
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(checked), "ns/series")
			runtime.KeepAlive(sink)
		})
	}
}
