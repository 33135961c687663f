package sst

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// Benchmark data shaped like what Shale's storage layer keeps in the LSM.

// partKey is the 9-byte partition prefix of the storage key layout.
func partKey(dst []byte, part int64, sub byte) []byte {
	dst = append(dst, 'P')
	dst = binary.BigEndian.AppendUint64(dst, uint64(part)^(1<<63))
	return append(dst, sub)
}

var (
	benchJobs   = []string{"api", "node", "kube-state-metrics", "cadvisor", "postgres", "redis", "ingress-nginx"}
	benchNames  = []string{"http_requests_total", "http_request_duration_seconds_bucket", "node_cpu_seconds_total", "container_memory_working_set_bytes", "go_goroutines", "process_resident_memory_bytes", "up", "kube_pod_status_phase"}
	benchLabels = []string{"method", "code", "handler", "le", "mode", "cpu", "pod", "namespace", "container"}
)

// indexEntries returns forward-index entries (series ref -> labels) and
// postings entries (label pair -> roaring bitmap of refs) of one partition,
// in table order: index-like values that compress well.
func indexEntries(rng *rand.Rand, series int) []Entry {
	const part = 1_767_225_600_000
	var out []Entry
	postings := map[string]*roaring.Bitmap{}
	addPosting := func(name, value string, ref uint32) {
		k := name + "\x00" + value
		bm := postings[k]
		if bm == nil {
			bm = roaring.New()
			postings[k] = bm
		}
		bm.Add(ref)
	}
	for ref := range uint32(series) {
		name := benchNames[rng.IntN(len(benchNames))]
		job := benchJobs[rng.IntN(len(benchJobs))]
		inst := fmt.Sprintf("10.%d.%d.%d:9100", rng.IntN(4), rng.IntN(32), rng.IntN(250))
		var v []byte
		lbl := func(n, val string) {
			v = binary.AppendUvarint(v, uint64(len(n)))
			v = append(v, n...)
			v = binary.AppendUvarint(v, uint64(len(val)))
			v = append(v, val...)
			addPosting(n, val, ref)
		}
		lbl("__name__", name)
		lbl("instance", inst)
		lbl("job", job)
		for _, l := range benchLabels[:2+rng.IntN(4)] {
			lbl(l, fmt.Sprintf("%s-%d", l, rng.IntN(20)))
		}
		out = append(out, Entry{Key: binary.BigEndian.AppendUint32(partKey(nil, part, 'F'), ref), Seq: 7, Kind: KindPut, Value: v})
	}
	var pk []string
	for k := range postings {
		pk = append(pk, k)
	}
	slices.Sort(pk)
	for _, k := range pk {
		bm := postings[k]
		bm.RunOptimize()
		val, err := bm.ToBytes()
		if err != nil {
			panic(err)
		}
		out = append(out, Entry{Key: append(partKey(nil, part, 'L'), k...), Seq: 7, Kind: KindMerge, Value: val})
	}
	// 'F' < 'L', so forward entries come first; both runs are sorted.
	return out
}

// gorillaEntries returns sample-block entries (series ref -> one partition's
// samples of the series): values shaped like Gorilla streams, a few header
// bytes then a bit stream of mostly-zero timestamp deltas and XORed floats
// with random mantissa bits. They barely compress.
func gorillaEntries(rng *rand.Rand, series, samples int) []Entry {
	const part = 1_767_225_600_000
	out := make([]Entry, 0, series)
	for ref := range uint32(series) {
		out = append(out, Entry{
			Key:   binary.BigEndian.AppendUint32(partKey(nil, part, 'S'), ref),
			Seq:   9,
			Kind:  KindMerge,
			Value: gorillaLike(rng, samples),
		})
	}
	return out
}

func gorillaLike(rng *rand.Rand, samples int) []byte {
	var w bitWriter
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(1_767_225_600_000+rng.IntN(15000)))
	w.buf = binary.BigEndian.AppendUint64(w.buf, rng.Uint64())
	w.buf = binary.AppendUvarint(w.buf, uint64(samples))
	leading, trailing := 12, 20
	for range samples {
		// Timestamp delta of delta: mostly 0 (one bit), sometimes a small jitter.
		if rng.IntN(10) < 8 {
			w.write(0, 1)
		} else {
			w.write(0b10, 2)
			w.write(rng.Uint64(), 7)
		}
		// Value XOR: unchanged sometimes, else meaningful bits in the previous
		// window or a new window.
		switch r := rng.IntN(10); {
		case r < 2:
			w.write(0, 1)
		case r < 7:
			w.write(0b10, 2)
			w.write(rng.Uint64(), 64-leading-trailing)
		default:
			leading, trailing = 8+rng.IntN(8), 10+rng.IntN(30)
			w.write(0b11, 2)
			w.write(uint64(leading), 5)
			w.write(uint64(64-leading-trailing), 6)
			w.write(rng.Uint64(), 64-leading-trailing)
		}
	}
	return w.buf
}

type bitWriter struct {
	buf  []byte
	bits uint8 // free bits in the last byte
}

func (w *bitWriter) write(v uint64, n int) {
	for n > 0 {
		if w.bits == 0 {
			w.buf = append(w.buf, 0)
			w.bits = 8
		}
		take := min(n, int(w.bits))
		chunk := byte(v>>(n-take)) & (1<<take - 1)
		w.buf[len(w.buf)-1] |= chunk << (int(w.bits) - take)
		w.bits -= uint8(take)
		n -= take
	}
}

// blocksOf cuts entries into data block contents of about blockSize bytes.
func blocksOf(entries []Entry, blockSize int) [][]byte {
	var out [][]byte
	b := blockBuilder{restartInterval: 16}
	for i := range entries {
		b.add(&entries[i])
		if b.size() >= blockSize {
			out = append(out, append([]byte(nil), b.finish()...))
			b.reset()
		}
	}
	if !b.empty() {
		out = append(out, append([]byte(nil), b.finish()...))
	}
	return out
}
