package main

import (
	"context"

	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/remotewrite"
	"github.com/shaledb/shale/storage"
)

// ingestAppendable lets the remote-write receiver append to the storage.
type ingestAppendable struct{ db *storage.DB }

func (a ingestAppendable) Appender(ctx context.Context) remotewrite.Appender {
	return a.db.IngestAppender(ctx)
}

// The receiver looks up a request's series in batches through it.
var _ remotewrite.SeriesResolver = (*storage.IngestAppender)(nil)

// cardinality serves /api/v1/status/tsdb from the head's newest partition.
type cardinality struct{ db *storage.DB }

func (c cardinality) Cardinality(_ context.Context, limit int) (promql.Cardinality, error) {
	st, mint, maxt, ok := c.db.HeadStats(limit)
	if !ok {
		return promql.Cardinality{}, nil
	}
	return promql.Cardinality{
		NumSeries:                   st.NumSeries,
		NumLabelPairs:               st.NumLabelPairs,
		MinTime:                     mint,
		MaxTime:                     maxt,
		SeriesCountByMetricName:     nameCounts(st.SeriesCountByMetricName),
		LabelValueCountByLabelName:  nameCounts(st.LabelValueCountByLabelName),
		MemoryInBytesByLabelName:    nameCounts(st.MemoryInBytesByLabelName),
		SeriesCountByLabelValuePair: nameCounts(st.SeriesCountByLabelValuePair),
	}, nil
}

func nameCounts(s []index.Stat) []promql.NameCount {
	out := make([]promql.NameCount, len(s))
	for i, x := range s {
		out[i] = promql.NameCount{Name: x.Name, Count: x.Count}
	}
	return out
}
