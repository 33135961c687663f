package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// kind is how a generated series' value moves from one scrape to the next.
type kind uint8

const (
	kindConst   kind = iota // rarely changes (node_memory_MemTotal_bytes, info metrics)
	kindCounter             // grows by a random step with two decimals (hundredths of a unit)
	kindGauge               // random walk with two decimals (hundredths of a unit)
	kindBucket              // cumulative histogram bucket: integer counter
)

// family is one metric name of a node_exporter-like target and the label
// sets it has on each target.
type family struct {
	name   string
	help   string
	kind   kind
	labels [][]string // label pairs of each series, name and value alternating
}

// nodeFamilies returns the metric families of one node_exporter-like target,
// shaped like a real 4-CPU host: CPU modes, network devices, file systems,
// disks, memory, load, a request-duration histogram and padding gauges so that
// the target has exactly perTarget series.
func nodeFamilies(perTarget int) []family {
	var fams []family
	add := func(name, help string, k kind, sets ...[]string) {
		fams = append(fams, family{name: name, help: help, kind: k, labels: sets})
	}
	modes := []string{"idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user"}
	var cpu [][]string
	for c := range 4 {
		for _, m := range modes {
			cpu = append(cpu, []string{"cpu", strconv.Itoa(c), "mode", m})
		}
	}
	add("node_cpu_seconds_total", "Seconds the CPUs spent in each mode.", kindCounter, cpu...)
	devs := [][]string{{"device", "eth0"}, {"device", "eth1"}, {"device", "lo"}, {"device", "docker0"}}
	for _, m := range []string{"receive_bytes", "transmit_bytes", "receive_packets", "transmit_packets", "receive_errs", "transmit_errs", "receive_drop", "transmit_drop"} {
		add("node_network_"+m+"_total", "Network device statistic "+m+".", kindCounter, devs...)
	}
	fs := [][]string{
		{"device", "/dev/sda1", "fstype", "ext4", "mountpoint", "/"},
		{"device", "/dev/sda2", "fstype", "ext4", "mountpoint", "/var"},
		{"device", "/dev/sdb1", "fstype", "xfs", "mountpoint", "/var/lib/data"},
		{"device", "tmpfs", "fstype", "tmpfs", "mountpoint", "/run"},
	}
	add("node_filesystem_avail_bytes", "Filesystem space available to non-root users in bytes.", kindGauge, fs...)
	add("node_filesystem_free_bytes", "Filesystem free space in bytes.", kindGauge, fs...)
	add("node_filesystem_size_bytes", "Filesystem size in bytes.", kindConst, fs...)
	add("node_filesystem_files_free", "Filesystem total free file nodes.", kindGauge, fs...)
	disks := [][]string{{"device", "sda"}, {"device", "sdb"}}
	for _, m := range []string{"read_bytes", "written_bytes", "reads_completed", "writes_completed", "io_time_seconds", "read_time_seconds", "write_time_seconds"} {
		add("node_disk_"+m+"_total", "Disk statistic "+m+".", kindCounter, disks...)
	}
	for _, m := range []string{"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree", "Active", "Inactive", "Dirty", "Slab", "Shmem"} {
		k := kindGauge
		if m == "MemTotal" || m == "SwapTotal" {
			k = kindConst
		}
		add("node_memory_"+m+"_bytes", "Memory information field "+m+".", k, []string{})
	}
	add("node_load1", "1m load average.", kindGauge, []string{})
	add("node_load5", "5m load average.", kindGauge, []string{})
	add("node_load15", "15m load average.", kindGauge, []string{})
	add("node_boot_time_seconds", "Node boot time, in unixtime.", kindConst, []string{})
	add("node_uname_info", "Labeled system information as provided by the uname system call.", kindConst,
		[]string{"machine", "x86_64", "release", "6.1.0-13-amd64", "sysname", "Linux"})
	var buckets [][]string
	for _, h := range []string{"/metrics", "/-/healthy"} {
		for _, le := range []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"} {
			buckets = append(buckets, []string{"handler", h, "le", le})
		}
	}
	add("http_request_duration_seconds_bucket", "Request latency of the exporter.", kindBucket, buckets...)
	add("up", "Whether the target answered its last scrape.", kindConst, []string{})

	// Cut or pad to exactly perTarget series.
	var out []family
	n := 0
	for _, f := range fams {
		if n+len(f.labels) > perTarget {
			f.labels = f.labels[:perTarget-n]
		}
		if len(f.labels) > 0 {
			out = append(out, f)
		}
		n += len(f.labels)
		if n >= perTarget {
			return out
		}
	}
	var pad [][]string
	for i := 0; n < perTarget; i++ {
		pad = append(pad, []string{"collector", "c" + strconv.Itoa(i%50), "item", strconv.Itoa(i)})
		n++
	}
	out = append(out, family{name: "node_extra_value", help: "Further node statistics.", kind: kindGauge, labels: pad})
	return out
}

// seriesDef is one generated series of a target: its labels (sorted by name,
// __name__ first as Prometheus sends them) and how its value moves.
type seriesDef struct {
	labels []prompb.Label
	kind   kind
	help   string
}

// targetSeries returns the series of target t in generation gen (a target
// that churns comes back as a new instance, hence new series).
func targetSeries(fams []family, t, gen int) []seriesDef {
	instance := fmt.Sprintf("host-%05d-%d:9100", t, gen)
	var out []seriesDef
	for _, f := range fams {
		for _, ls := range f.labels {
			lbs := make([]prompb.Label, 0, len(ls)/2+3)
			lbs = append(lbs, prompb.Label{Name: "__name__", Value: f.name})
			for i := 0; i < len(ls); i += 2 {
				lbs = append(lbs, prompb.Label{Name: ls[i], Value: ls[i+1]})
			}
			lbs = append(lbs,
				prompb.Label{Name: "instance", Value: instance},
				prompb.Label{Name: "job", Value: "node"},
			)
			sortLabels(lbs)
			out = append(out, seriesDef{labels: lbs, kind: f.kind, help: f.help})
		}
	}
	return out
}

func sortLabels(lbs []prompb.Label) {
	// Insertion sort: a few labels, and __name__ sorts first on its own
	// because '_' (0x5f) is below every lower-case letter.
	for i := 1; i < len(lbs); i++ {
		for j := i; j > 0 && lbs[j].Name < lbs[j-1].Name; j-- {
			lbs[j], lbs[j-1] = lbs[j-1], lbs[j]
		}
	}
}

// Encoded sizes of the parts of one sample that change per request. Values
// are always encoded (even 0, which proto3 would omit) as a fixed64, and
// timestamps in ms between 1971 and 2109 take 6 varint bytes, so the payload
// layout of a shard is the same at every step and only these bytes change.
const (
	tsVarintLen = 6
	minTS       = int64(1) << 35 // smallest ms timestamp with a 6-byte varint
	maxTS       = int64(1)<<42 - 1
	// sampleMsgLen: tag+fixed64 value, tag+varint timestamp.
	sampleMsgLen = 1 + 8 + 1 + tsVarintLen
	// sampleFieldLen: the Sample as a length-delimited field of TimeSeries.
	sampleFieldLen = 1 + 1 + sampleMsgLen
)

// versionOTLP is the "version" of a load sent as OTLP/HTTP (protobuf, not
// compressed) instead of remote write.
const versionOTLP = 3

// shard is a fixed group of series sent together in one request per step.
// Its uncompressed payload is built once with the library types; each step
// only patches the value and timestamp bytes of every sample in place and
// compresses the result.
type shard struct {
	version   int // remote write 1 or 2
	perSeries int // samples of each series in one request (consecutive scrapes)
	series    []seriesDef
	kinds     []kind
	units     []int64 // each series' value in its kind's integer unit
	values    []float64
	raw       []byte // uncompressed payload
	valueOffs []int  // offset of the 8 value bytes of sample j of series i at [i*perSeries+j]
	compBuf   []byte
}

// newShard builds the payload template of series for remote write version
// 1 or 2, with perSeries samples of every series in each request.
func newShard(version, perSeries int, series []seriesDef, rng *rand.Rand) (*shard, error) {
	s := &shard{version: version, perSeries: max(1, perSeries), series: series}
	s.kinds = make([]kind, len(series))
	s.units = make([]int64, len(series))
	s.values = make([]float64, len(series))
	for i, sd := range series {
		s.kinds[i] = sd.kind
		s.units[i] = initialUnits(sd.kind, rng)
		s.values[i] = valueOf(sd.kind, s.units[i])
	}
	var err error
	switch version {
	case 1:
		err = s.buildV1()
	case 2:
		err = s.buildV2()
	case versionOTLP:
		s.buildOTLP()
	default:
		err = fmt.Errorf("remote write version %d: want 1, 2 or %d (OTLP)", version, versionOTLP)
	}
	return s, err
}

// initialUnits returns a series' first value in its kind's integer unit.
func initialUnits(k kind, rng *rand.Rand) int64 {
	switch k {
	case kindConst:
		return int64(rng.IntN(1<<20)) * 4096
	case kindBucket:
		return int64(rng.IntN(10000))
	default: // counters and gauges, in hundredths
		return int64(rng.IntN(1_000_000))
	}
}

// valueOf is the sample value of units. As real exporters do (CPU seconds
// are kernel ticks / 100, bytes are integers), each value is computed from
// an integer, not accumulated in floating point: adding 0.01 steps to a
// float64 would drift to values like 12345.670000000002 that no exporter
// sends and that need all 17 significant digits.
func valueOf(k kind, units int64) float64 {
	if k == kindCounter || k == kindGauge {
		return float64(units) / 100
	}
	return float64(units)
}

// appendSampleField appends TimeSeries field 2 (one Sample) with placeholder
// value and timestamp and returns the buffer and the offset of the value.
func appendSampleField(dst []byte) ([]byte, int) {
	dst = append(dst, 2<<3|2, sampleMsgLen)
	dst = append(dst, 1<<3|1) // value, fixed64
	off := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	dst = append(dst, 2<<3) // timestamp, varint (wire type 0)
	dst = appendFixedVarint(dst, minTS)
	return dst, off
}

func appendVarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// appendFixedVarint appends ts as a varint of exactly tsVarintLen bytes.
func appendFixedVarint(dst []byte, ts int64) []byte {
	v := uint64(ts)
	for range tsVarintLen - 1 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func (s *shard) buildV1() error {
	for i, sd := range s.series {
		// The labels half of the TimeSeries, marshalled by prompb.
		lb, err := (&prompb.TimeSeries{Labels: sd.labels}).Marshal()
		if err != nil {
			return fmt.Errorf("marshal labels of series %d: %w", i, err)
		}
		s.raw = append(s.raw, 1<<3|2) // WriteRequest.timeseries
		s.raw = appendVarint(s.raw, uint64(len(lb)+s.perSeries*sampleFieldLen))
		s.raw = append(s.raw, lb...)
		s.appendSamples()
	}
	return nil
}

// appendSamples appends the placeholder samples of one series.
func (s *shard) appendSamples() {
	for range s.perSeries {
		var off int
		s.raw, off = appendSampleField(s.raw)
		s.valueOffs = append(s.valueOffs, off)
	}
}

func (s *shard) buildV2() error {
	st := writev2.NewSymbolTable()
	type part struct{ refs, meta []byte }
	parts := make([]part, len(s.series))
	for i, sd := range s.series {
		var refs []uint32
		for _, l := range sd.labels {
			refs = append(refs, st.Symbolize(l.Name), st.Symbolize(l.Value))
		}
		mt := writev2.Metadata_METRIC_TYPE_GAUGE
		if sd.kind == kindCounter || sd.kind == kindBucket {
			mt = writev2.Metadata_METRIC_TYPE_COUNTER
		}
		if sd.kind == kindBucket {
			mt = writev2.Metadata_METRIC_TYPE_HISTOGRAM
		}
		rb, err := (&writev2.TimeSeries{LabelsRefs: refs}).Marshal()
		if err != nil {
			return fmt.Errorf("marshal label refs of series %d: %w", i, err)
		}
		mb, err := (&writev2.TimeSeries{Metadata: writev2.Metadata{Type: mt, HelpRef: st.Symbolize(sd.help)}}).Marshal()
		if err != nil {
			return fmt.Errorf("marshal metadata of series %d: %w", i, err)
		}
		parts[i] = part{rb, mb}
	}
	sym, err := (&writev2.Request{Symbols: st.Symbols()}).Marshal()
	if err != nil {
		return fmt.Errorf("marshal symbols: %w", err)
	}
	s.raw = append(s.raw, sym...)
	for _, p := range parts {
		s.raw = append(s.raw, 5<<3|2) // Request.timeseries
		s.raw = appendVarint(s.raw, uint64(len(p.refs)+s.perSeries*sampleFieldLen+len(p.meta)))
		s.raw = append(s.raw, p.refs...)
		s.appendSamples()
		s.raw = append(s.raw, p.meta...)
	}
	return nil
}

// buildOTLP builds an ExportMetricsServiceRequest of one resource without
// attributes and one scope: a gauge per metric name, a data point per sample
// whose attributes are the series' labels but __name__ (job and instance
// included, so that every system stores the same series as from remote
// write). time_unix_nano and as_double are fixed64 fields, patched in place
// like remote write's values; the time lies just before the value.
func (s *shard) buildOTLP() {
	s.valueOffs = make([]int, len(s.series)*s.perSeries)
	var scope []byte // ScopeMetrics content: its metrics
	for lo := 0; lo < len(s.series); {
		name := s.series[lo].labels[0].Value // __name__ sorts first
		hi := lo + 1
		for hi < len(s.series) && s.series[hi].labels[0].Value == name {
			hi++
		}
		var points []byte // Gauge content
		var offs []int    // value offsets in points, by sample index
		var idx []int
		for i := lo; i < hi; i++ {
			var attrs []byte
			for _, l := range s.series[i].labels[1:] {
				v := protoBytes(0x0a, []byte(l.Value))                                 // AnyValue.string_value
				kv := append(protoBytes(0x0a, []byte(l.Name)), protoBytes(0x12, v)...) // KeyValue
				attrs = append(attrs, protoBytes(0x3a, kv)...)                         // NumberDataPoint.attributes
			}
			for j := range s.perSeries {
				dp := append(slices.Clone(attrs), 0x19) // time_unix_nano, fixed64
				dp = binary.LittleEndian.AppendUint64(dp, 0)
				dp = append(dp, 0x21) // as_double, fixed64
				voff := len(dp)
				dp = binary.LittleEndian.AppendUint64(dp, 0)
				points = append(points, 0x0a) // Gauge.data_points
				points = appendVarint(points, uint64(len(dp)))
				offs = append(offs, len(points)+voff)
				idx = append(idx, i*s.perSeries+j)
				points = append(points, dp...)
			}
		}
		metric := protoBytes(0x0a, []byte(name)) // Metric.name
		metric = append(metric, 0x2a)            // Metric.gauge
		metric = appendVarint(metric, uint64(len(points)))
		shift := len(metric)
		metric = append(metric, points...)
		scope = append(scope, 0x12) // ScopeMetrics.metrics
		scope = appendVarint(scope, uint64(len(metric)))
		shift += len(scope)
		scope = append(scope, metric...)
		for k, o := range offs {
			s.valueOffs[idx[k]] = o + shift
		}
		lo = hi
	}
	rm := append([]byte{0x12}, appendVarint(nil, uint64(len(scope)))...) // ResourceMetrics.scope_metrics
	s.raw = append([]byte{0x0a}, appendVarint(nil, uint64(len(rm)+len(scope)))...)
	s.raw = append(s.raw, rm...)
	head := len(s.raw)
	s.raw = append(s.raw, scope...)
	for i := range s.valueOffs {
		s.valueOffs[i] += head
	}
}

// protoBytes returns a length-delimited field: tag, length, b.
func protoBytes(tag byte, b []byte) []byte {
	out := append([]byte{tag}, appendVarint(nil, uint64(len(b)))...)
	return append(out, b...)
}

// advance moves every series' value one scrape forward.
func (s *shard) advance(rng *rand.Rand) {
	for i, k := range s.kinds {
		u := s.units[i]
		switch k {
		case kindConst:
			if rng.IntN(1000) == 0 {
				u += 4096
			}
		case kindCounter:
			u += int64(rng.IntN(1500))
		case kindGauge:
			u += int64(rng.IntN(2001) - 1000)
		case kindBucket:
			u += int64(rng.IntN(20))
		}
		s.units[i] = u
		s.values[i] = valueOf(k, u)
	}
}

// payload fills the template with perSeries consecutive scrapes, the first
// at ts with the current values and each further one step later with the
// values advanced, and returns the snappy-compressed body, valid until the
// next call. The values are left at those of the last scrape.
func (s *shard) payload(ts int64, step time.Duration, rng *rand.Rand) ([]byte, error) {
	last := ts + int64(s.perSeries-1)*step.Milliseconds()
	if ts < minTS || last > maxTS {
		return nil, fmt.Errorf("timestamp %d outside the range this generator encodes", ts)
	}
	for j := range s.perSeries {
		if j > 0 {
			s.advance(rng)
		}
		t := uint64(ts + int64(j)*step.Milliseconds())
		if s.version == versionOTLP {
			ns := t * uint64(time.Millisecond)
			for i, v := range s.values {
				off := s.valueOffs[i*s.perSeries+j]
				binary.LittleEndian.PutUint64(s.raw[off:], math.Float64bits(v))
				binary.LittleEndian.PutUint64(s.raw[off-9:], ns)
			}
			continue
		}
		for i, v := range s.values {
			off := s.valueOffs[i*s.perSeries+j]
			binary.LittleEndian.PutUint64(s.raw[off:], math.Float64bits(v))
			b := s.raw[off+9 : off+9+tsVarintLen]
			x := t
			for k := range tsVarintLen - 1 {
				b[k] = byte(x) | 0x80
				x >>= 7
			}
			b[tsVarintLen-1] = byte(x)
		}
	}
	if s.version == versionOTLP {
		return s.raw, nil
	}
	s.compBuf = snappy.Encode(s.compBuf[:cap(s.compBuf)], s.raw)
	return s.compBuf, nil
}

// contentType returns the Content-Type of a remote write version.
func contentType(version int) string {
	if version == 2 {
		return "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	}
	return "application/x-protobuf"
}

// protoVersionHeader is X-Prometheus-Remote-Write-Version for a version.
func protoVersionHeader(version int) string {
	if version == 2 {
		return "2.0.0"
	}
	return "0.1.0"
}
