package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Source reads samples from somewhere outside and hands them on in batches.
type Source interface {
	// Run calls emit with batches until the input ends (nil), the input
	// is bad, emit fails or ctx ends (an error). emit owns the batch it
	// is given.
	Run(ctx context.Context, emit func(Batch) error) error
	// Progress says how far Run is: done of total in unit ("samples" or
	// "bytes"); total is 0 when unknown. Safe to call concurrently with
	// Run.
	Progress() (done, total int64, unit string)
}

// Refused counts samples a sink refused: floats and histograms, and all of
// them by reason.
type Refused struct {
	Samples, Histograms int
	Reasons             map[string]int
	// First is why the first refused sample was refused, with its series
	// where the reason alone does not say it; "" where it is not kept.
	First string
}

// Add counts one refused sample.
func (r *Refused) Add(histogram bool, reason string) {
	r.AddN(histogram, reason, 1)
}

// AddN counts n refused samples of one kind.
func (r *Refused) AddN(histogram bool, reason string, n int) {
	if n <= 0 {
		return
	}
	if histogram {
		r.Histograms += n
	} else {
		r.Samples += n
	}
	if r.Reasons == nil {
		r.Reasons = make(map[string]int)
	}
	r.Reasons[reason] += n
}

// Total returns the number of samples refused.
func (r Refused) Total() int { return r.Samples + r.Histograms }

func (r *Refused) add(o Refused) {
	if r.First == "" {
		r.First = o.First
	}
	r.Samples += o.Samples
	r.Histograms += o.Histograms
	for k, v := range o.Reasons {
		if r.Reasons == nil {
			r.Reasons = make(map[string]int)
		}
		r.Reasons[k] += v
	}
}

// Sink stores batches.
type Sink interface {
	// Write stores b, retrying for as long as it takes what a retry can
	// fix (an overloaded or failing store), and returns the samples it
	// refused for good, by reason (older than the retention, invalid
	// labels ...). An error means the import cannot go on; b may then be
	// partly stored, and running the import again stores the rest (the
	// samples already stored keep one value). Write may be called from
	// several goroutines at once.
	Write(ctx context.Context, b Batch) (Refused, error)
}

// Options are the settings of Run.
type Options struct {
	// Writers is how many batches are written at once.
	Writers int
	// Progress, if not nil, gets a progress bar (Terminal) or a plain
	// line every ProgressInterval.
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
}

// DefaultOptions returns the settings the tsdb import command starts from.
func DefaultOptions() Options {
	return Options{Writers: 4, ProgressInterval: 10 * time.Second}
}

// Validate checks the settings.
func (o Options) Validate() error {
	if o.Writers < 1 {
		return fmt.Errorf("writers must be at least 1, got %d", o.Writers)
	}
	if o.Progress != nil && o.ProgressInterval <= 0 {
		return fmt.Errorf("progress interval must be positive, got %s", o.ProgressInterval)
	}
	return nil
}

// Summary is what an import did.
type Summary struct {
	// Series is the number of distinct series read.
	Series int
	// Samples and Histograms are the float samples and native histogram
	// samples stored (read, less those refused).
	Samples, Histograms int
	// MinT and MaxT are the oldest and newest timestamps read, in ms.
	MinT, MaxT int64
	// Refused counts the samples refused, by reason.
	Refused  Refused
	Duration time.Duration
}

// Rate returns the samples (floats and histograms) stored per second.
func (s Summary) Rate() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Samples+s.Histograms) / s.Duration.Seconds()
}

// String renders the summary for a person, over a few lines.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "series:      %d\n", s.Series)
	fmt.Fprintf(&b, "samples:     %d floats, %d histograms\n", s.Samples, s.Histograms)
	if s.MinT <= s.MaxT {
		fmt.Fprintf(&b, "time range:  %s to %s\n", formatMs(s.MinT), formatMs(s.MaxT))
	} else {
		fmt.Fprintf(&b, "time range:  (no samples)\n")
	}
	fmt.Fprintf(&b, "took:        %s (%.0f samples/s)\n", s.Duration.Round(time.Millisecond), s.Rate())
	fmt.Fprintf(&b, "refused:     %d floats, %d histograms\n", s.Refused.Samples, s.Refused.Histograms)
	for _, k := range slices.Sorted(maps.Keys(s.Refused.Reasons)) {
		fmt.Fprintf(&b, "  %10d  %s\n", s.Refused.Reasons[k], k)
	}
	return b.String()
}

func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// Run reads src and writes what it reads to sink, with opts.Writers batches
// in flight, and returns what it did. It stops at the first error of the
// source or the sink, or when ctx ends; the summary then counts what was
// stored until then.
func Run(ctx context.Context, src Source, sink Sink, opts Options) (Summary, error) {
	if err := opts.Validate(); err != nil {
		return Summary{}, err
	}
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	st := &state{seen: make(map[uint64]struct{}), sum: Summary{MinT: math.MaxInt64, MaxT: math.MinInt64}}
	batches := make(chan Batch, opts.Writers)
	var wg sync.WaitGroup
	for range opts.Writers {
		wg.Go(func() {
			for b := range batches {
				if ctx.Err() != nil {
					continue // drain
				}
				refused, err := sink.Write(ctx, b)
				if err != nil {
					cancel(fmt.Errorf("write: %w", err))
					continue
				}
				st.done(b, refused)
			}
		})
	}
	var progressDone chan struct{}
	stopProgress := func() {}
	if opts.Progress != nil {
		progressDone = make(chan struct{})
		stop := make(chan struct{})
		p := &progress{w: opts.Progress, terminal: opts.Terminal, src: src, st: st, start: start}
		go func() {
			defer close(progressDone)
			p.loop(stop, opts.ProgressInterval)
		}()
		stopProgress = func() { close(stop); <-progressDone }
	}
	srcErr := src.Run(ctx, func(b Batch) error {
		st.read(b)
		select {
		case batches <- b:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	close(batches)
	wg.Wait()
	stopProgress()
	sum := st.summary()
	sum.Duration = time.Since(start)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return sum, cause // the sink's error: the source's is only its echo
	}
	if srcErr != nil {
		return sum, fmt.Errorf("read: %w", srcErr)
	}
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	return sum, nil
}

// state is the running count of an import.
type state struct {
	mu   sync.Mutex
	seen map[uint64]struct{}
	sum  Summary
	// read counts the samples the source handed on, written those the
	// sink stored or refused.
	readSamples, written int64
}

func (s *state) read(b Batch) {
	mint, maxt := b.timeRange()
	n := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ser := range b {
		s.seen[ser.Labels.Hash()] = struct{}{}
		n += len(ser.Samples)
	}
	s.readSamples += int64(n)
	s.sum.MinT = min(s.sum.MinT, mint)
	s.sum.MaxT = max(s.sum.MaxT, maxt)
}

func (s *state) done(b Batch, refused Refused) {
	floats, hists := b.samples()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written += int64(floats + hists)
	s.sum.Refused.add(refused)
	s.sum.Samples += floats - refused.Samples
	s.sum.Histograms += hists - refused.Histograms
}

func (s *state) summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.sum
	sum.Refused.Reasons = maps.Clone(s.sum.Refused.Reasons)
	sum.Series = len(s.seen)
	return sum
}

func (s *state) counts() (written, refused int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, int64(s.sum.Refused.Total())
}
