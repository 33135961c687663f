package storage

import (
	"context"

	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// chunkQuerier serves the chunk interface (used by remote read and
// federation-like callers) by encoding the querier's samples as chunks.
type chunkQuerier struct {
	q promstorage.Querier
}

func (c *chunkQuerier) Select(ctx context.Context, sortSeries bool, hints *promstorage.SelectHints, ms ...*labels.Matcher) promstorage.ChunkSeriesSet {
	return promstorage.NewSeriesSetToChunkSet(c.q.Select(ctx, sortSeries, hints, ms...))
}

func (c *chunkQuerier) LabelValues(ctx context.Context, name string, hints *promstorage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return c.q.LabelValues(ctx, name, hints, ms...)
}

func (c *chunkQuerier) LabelNames(ctx context.Context, hints *promstorage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return c.q.LabelNames(ctx, hints, ms...)
}

func (c *chunkQuerier) Close() error { return c.q.Close() }
