package promql

import (
	"context"

	"github.com/shaledb/shale/storage"
)

// HeadCardinality serves the cardinality statistics of the head of Shale's
// storage, as Prometheus serves those of its head block.
type HeadCardinality struct{ DB *storage.DB }

// Cardinality implements CardinalitySource.
func (c HeadCardinality) Cardinality(_ context.Context, limit int) (Cardinality, error) {
	st, mint, maxt, ok := c.DB.HeadStats(limit)
	if !ok {
		return Cardinality{}, nil
	}
	return Cardinality{
		NumSeries:                   st.NumSeries,
		NumLabelPairs:               st.NumLabelPairs,
		ChunkCount:                  c.DB.HeadBlocks(),
		MinTime:                     mint,
		MaxTime:                     maxt,
		SeriesCountByMetricName:     nameCounts(st.SeriesCountByMetricName),
		LabelValueCountByLabelName:  nameCounts(st.LabelValueCountByLabelName),
		MemoryInBytesByLabelName:    nameCounts(st.MemoryInBytesByLabelName),
		SeriesCountByLabelValuePair: nameCounts(st.SeriesCountByLabelValuePair),
	}, nil
}

// nameCounts converts the statistics of an index (Shale's or upstream's,
// both a name and a count) to the API's.
func nameCounts[S ~struct {
	Name  string
	Count uint64
}](in []S) []NameCount {
	out := make([]NameCount, 0, len(in))
	for _, s := range in {
		out = append(out, NameCount(s))
	}
	return out
}
