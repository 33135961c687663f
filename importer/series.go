package importer

import (
	"iter"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
)

// Sample is one sample of a series: a float (H and FH nil) or a native
// histogram (one of H and FH set).
type Sample struct {
	T  int64
	V  float64
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// IsHistogram reports whether s is a native histogram sample.
func (s Sample) IsHistogram() bool { return s.H != nil || s.FH != nil }

// Series is some of one series' samples, in the order the source read them
// (time order for every source here). A Sink may keep neither the slice nor
// the labels past Write.
type Series struct {
	Labels  labels.Labels
	Samples []Sample
}

// Batch is what a Source hands a Sink at a time.
type Batch []Series

// setLabels sets the labels set (name and value) on every series of b,
// replacing a label of the same name, as VictoriaMetrics' extra_label does.
func (b Batch) setLabels(set []labels.Label) {
	lb := labels.NewBuilder(labels.EmptyLabels())
	for i := range b {
		lb.Reset(b[i].Labels)
		for _, l := range set {
			lb.Set(l.Name, l.Value)
		}
		b[i].Labels = lb.Labels()
	}
}

// split yields b in parts of at most maxSamples samples, cutting a series
// with more into several, so that one long line (a series' whole history)
// is committed in bounded transactions.
func (b Batch) split(maxSamples int) iter.Seq[Batch] {
	return func(yield func(Batch) bool) {
		var part Batch
		n := 0
		for _, ser := range b {
			smp := ser.Samples
			for len(smp) > 0 {
				k := min(len(smp), maxSamples-n)
				part = append(part, Series{Labels: ser.Labels, Samples: smp[:k:k]})
				smp, n = smp[k:], n+k
				if n == maxSamples {
					if !yield(part) {
						return
					}
					part, n = nil, 0
				}
			}
		}
		if len(part) > 0 {
			yield(part)
		}
	}
}

// samples returns the number of float samples and of histograms in b.
func (b Batch) samples() (floats, hists int) {
	for _, s := range b {
		for _, smp := range s.Samples {
			if smp.IsHistogram() {
				hists++
			} else {
				floats++
			}
		}
	}
	return floats, hists
}

// timeRange returns the oldest and newest timestamps of b
// (math.MaxInt64, math.MinInt64 when b is empty).
func (b Batch) timeRange() (mint, maxt int64) {
	mint, maxt = math.MaxInt64, math.MinInt64
	for _, s := range b {
		if n := len(s.Samples); n > 0 {
			// Sources yield each series in time order, but a sink
			// must not rely on it for its counts.
			for _, smp := range s.Samples {
				mint = min(mint, smp.T)
				maxt = max(maxt, smp.T)
			}
		}
	}
	return mint, maxt
}
