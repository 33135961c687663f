package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// MaxOpenMetricsBytes bounds the file an OpenMetrics source reads: like
// promtool, it holds the whole file in memory.
const MaxOpenMetricsBytes = 8 << 30

// OpenMetricsSource reads an OpenMetrics text file as promtool tsdb
// create-blocks-from openmetrics does: through the upstream parser, every
// sample must have a timestamp (in seconds, as OpenMetrics says), the file
// must end with "# EOF", and only samples are read (no exemplars; metadata
// is not stored). The whole file is checked before anything is written: a
// file the parser refuses imports nothing.
//
// It reads the file once to learn its time range, then once for each two
// hours that hold samples, newest first (as PromSource does).
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

// scanOpenMetrics checks the whole input and returns its time range and
// number of samples.
func scanOpenMetrics(data []byte) (mint, maxt int64, n int64, err error) {
	mint, maxt = math.MaxInt64, math.MinInt64
	p := textparse.NewOpenMetricsParser(data, nil)
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return mint, maxt, n, nil
		}
		if err != nil {
			return 0, 0, 0, err
		}
		if e != textparse.EntrySeries {
			continue
		}
		series, ts, _ := p.Series()
		if ts == nil {
			return 0, 0, 0, fmt.Errorf("expected timestamp for series %s, got none", series)
		}
		mint, maxt = min(mint, *ts), max(maxt, *ts)
		n++
	}
}

// Run implements Source.
func (s *OpenMetricsSource) Run(ctx context.Context, emit func(Batch) error) error {
	mint, maxt, n, err := scanOpenMetrics(s.data)
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.total.Store(n)
	if n == 0 {
		return nil
	}
	// Windows [start, start+WindowMs), newest first; prev is the newest
	// sample older than the window just read, to skip empty windows.
	start := floorDiv(maxt, WindowMs) * WindowMs
	for start+WindowMs > mint {
		prev, err := s.window(ctx, start, start+WindowMs, emit)
		if err != nil {
			return err
		}
		if prev == math.MinInt64 {
			return nil
		}
		start = floorDiv(prev, WindowMs) * WindowMs
	}
	return nil
}

// window emits the samples of [from, to) and returns the newest sample
// time before from (math.MinInt64 if none).
func (s *OpenMetricsSource) window(ctx context.Context, from, to int64, emit func(Batch) error) (int64, error) {
	prev := int64(math.MinInt64)
	st := labels.NewSymbolTable()
	p := textparse.NewOpenMetricsParser(s.data, st)
	// The series text of a line names its labels: build them once.
	known := map[string]labels.Labels{}
	var (
		batch Batch
		n     int
		lastS string
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		s.read.Add(int64(n))
		err := emit(batch)
		batch, n, lastS = nil, 0, ""
		return err
	}
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.name, err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		series, ts, v := p.Series()
		t := *ts // checked by scanOpenMetrics
		if t < from {
			prev = max(prev, t)
			continue
		}
		if t >= to {
			continue
		}
		if len(batch) > 0 && string(series) == lastS {
			last := &batch[len(batch)-1]
			last.Samples = append(last.Samples, Sample{T: t, V: v})
		} else {
			lset, ok := known[string(series)]
			if !ok {
				p.Labels(&lset)
				known[string(series)] = lset
			}
			lastS = string(series)
			batch = append(batch, Series{Labels: lset, Samples: []Sample{{T: t, V: v}}})
		}
		if n++; n >= BatchSamples {
			if err := flush(); err != nil {
				return 0, err
			}
			if err := ctx.Err(); err != nil {
				return 0, context.Cause(ctx)
			}
		}
	}
	return prev, flush()
}
