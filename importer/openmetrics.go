package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// MaxOpenMetricsBytes bounds the file an OpenMetrics source reads: like
// promtool, it holds the whole file in memory, and its samples (about as
// many bytes again).
const MaxOpenMetricsBytes = 4 << 30

// OpenMetricsSource reads an OpenMetrics text file as promtool tsdb
// create-blocks-from openmetrics does: through the upstream parser, every
// sample must have a timestamp (in seconds, as OpenMetrics says), the file
// must end with "# EOF", and only samples are read (no exemplars; metadata
// is not stored). The whole file is checked before anything is written: a
// file the parser refuses imports nothing.
//
// It parses the file once, keeping the samples by two-hour window, and
// hands the windows on newest first (as PromSource does).
type OpenMetricsSource struct {
	name        string
	data        []byte
	read, total atomic.Int64
}

// NewOpenMetricsFileSource returns a source reading the file path.
func NewOpenMetricsFileSource(path string) (*OpenMetricsSource, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxOpenMetricsBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d an OpenMetrics import reads (it holds the file in memory)", path, st.Size(), int64(MaxOpenMetricsBytes))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return NewOpenMetricsSource(path, data), nil
}

// NewOpenMetricsSource returns a source reading data; name says where it
// came from in errors.
func NewOpenMetricsSource(name string, data []byte) *OpenMetricsSource {
	return &OpenMetricsSource{name: name, data: data}
}

// Progress implements Source.
func (s *OpenMetricsSource) Progress() (done, total int64, unit string) {
	return s.read.Load(), s.total.Load(), "samples"
}

// Run implements Source. It parses the whole input first, keeping its
// samples by window; then it hands the windows on, newest first.
func (s *OpenMetricsSource) Run(ctx context.Context, emit func(Batch) error) error {
	windows, n, err := parseOpenMetrics(s.data)
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.total.Store(n)
	return emitWindows(ctx, windows, func(n int) { s.read.Add(int64(n)) }, emit)
}

// emitWindows hands the windows' series on in batches of about BatchSamples
// samples, newest window first, each batch within one window: a batch that
// spans many time partitions would reopen them all at once in the storage,
// which writes old partitions out again when many are open, and a batch
// that keeps meeting a partition being written out never gets through.
// done is told the samples of each batch handed on.
func emitWindows(ctx context.Context, windows map[int64]*omWindow, done func(int), emit func(Batch) error) error {
	starts := slices.Sorted(maps.Keys(windows))
	slices.Reverse(starts)
	for _, start := range starts {
		w := windows[start]
		delete(windows, start) // let it go once handed on
		var (
			batch Batch
			m     int
		)
		for _, ser := range w.series {
			batch = append(batch, *ser)
			if m += len(ser.Samples); m >= BatchSamples {
				done(m)
				if err := emit(batch); err != nil {
					return err
				}
				batch, m = nil, 0
				if err := ctx.Err(); err != nil {
					return context.Cause(ctx)
				}
			}
		}
		if len(batch) > 0 {
			done(m)
			if err := emit(batch); err != nil {
				return err
			}
		}
	}
	return nil
}

// add puts the samples of ser into their windows.
func addToWindows(windows map[int64]*omWindow, key string, ser Series) {
	for len(ser.Samples) > 0 {
		start := floorDiv(ser.Samples[0].T, WindowMs) * WindowMs
		n := sort.Search(len(ser.Samples), func(i int) bool { return ser.Samples[i].T >= start+WindowMs })
		w := windows[start]
		if w == nil {
			w = &omWindow{index: map[string]int{}}
			windows[start] = w
		}
		if i, ok := w.index[key]; ok {
			w.series[i].Samples = append(w.series[i].Samples, ser.Samples[:n]...)
		} else {
			w.index[key] = len(w.series)
			w.series = append(w.series, &Series{Labels: ser.Labels, Samples: ser.Samples[:n:n]})
		}
		ser.Samples = ser.Samples[n:]
	}
}

// omWindow is the samples of one window, by series in the order met.
type omWindow struct {
	series []*Series
	index  map[string]int // series text -> position
}

// parseOpenMetrics parses data whole, as promtool does: every sample must
// have a timestamp and the file must end with "# EOF". It returns the
// samples by window start and their number.
func parseOpenMetrics(data []byte) (map[int64]*omWindow, int64, error) {
	windows := map[int64]*omWindow{}
	st := labels.NewSymbolTable()
	p := textparse.NewOpenMetricsParser(data, st)
	// The series text of a line names its labels: build them once.
	known := map[string]labels.Labels{}
	var (
		n       int64
		lastW   *omWindow
		lastS   string
		lastSer *Series
	)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return windows, n, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if e != textparse.EntrySeries {
			continue
		}
		series, ts, v := p.Series()
		if ts == nil {
			return nil, 0, fmt.Errorf("expected timestamp for series %s, got none", series)
		}
		t := *ts
		n++
		start := floorDiv(t, WindowMs) * WindowMs
		w := windows[start]
		if w == nil {
			w = &omWindow{index: map[string]int{}}
			windows[start] = w
		}
		if w == lastW && lastSer != nil && string(series) == lastS {
			lastSer.Samples = append(lastSer.Samples, Sample{T: t, V: v})
			continue
		}
		if i, ok := w.index[string(series)]; ok {
			lastSer = w.series[i]
		} else {
			lset, ok := known[string(series)]
			if !ok {
				p.Labels(&lset)
				known[string(series)] = lset
			}
			lastSer = &Series{Labels: lset}
			w.index[string(series)] = len(w.series)
			w.series = append(w.series, lastSer)
		}
		lastSer.Samples = append(lastSer.Samples, Sample{T: t, V: v})
		lastW, lastS = w, string(series)
	}
}
