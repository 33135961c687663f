package main

import (
	"context"

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
