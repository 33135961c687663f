package promql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/gate"

	"github.com/shaledb/shale/internal/promreg"
)

// POST /api/v1/read, remote read as Prometheus serves it
// (storage/remote/read_handler.go): raw samples, or XOR chunks streamed in
// frames of at most RemoteReadMaxBytesInFrame. Shale has no external labels,
// so matchers and series pass unchanged.

// maxReadRequest bounds a read request, compressed and decoded.
const maxReadRequest = 32 << 20

// errReadLimit is a remote-read error the client caused: 400.
type errReadLimit struct{ msg string }

func (e errReadLimit) Error() string { return e.msg }

type readHandler struct {
	logger      *slog.Logger
	queryable   storage.SampleAndChunkQueryable
	sampleLimit int
	maxFrame    int
	gate        *gate.Gate
	queries     prometheus.Gauge
	gateWait    prometheus.Histogram
	marshalPool sync.Pool
}

func newReadHandler(opts Options, comps Components, logger *slog.Logger) (*readHandler, error) {
	sq, ok := comps.Queryable.(storage.SampleAndChunkQueryable)
	if !ok {
		sq = sampleAndChunkQueryable{comps.Queryable}
	}
	set := promreg.NewSet(comps.Registerer)
	h := &readHandler{
		logger:      logger,
		queryable:   sq,
		sampleLimit: opts.RemoteReadSampleLimit,
		maxFrame:    opts.RemoteReadMaxBytesInFrame,
		gate:        gate.New(opts.RemoteReadConcurrencyLimit),
		queries: set.Gauge("prometheus_remote_read_handler_queries",
			"The current number of remote read queries that are either in execution or queued on the handler."),
		gateWait: set.Histogram(prometheus.HistogramOpts{
			Name:                            "prometheus_remote_read_handler_gate_wait_duration_seconds",
			Help:                            "How long a remote read request spent waiting for the concurrency gate, including requests canceled while waiting.",
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("register remote read metrics: %w", err)
	}
	return h, nil
}

func (h *readHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	err := h.gate.Start(r.Context())
	h.gateWait.Observe(time.Since(start).Seconds())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.queries.Inc()
	defer h.gate.Done()
	defer h.queries.Dec()

	req, err := decodeReadRequest(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	streamed, err := wantsChunks(req.AcceptedResponseTypes)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if streamed {
		h.streamChunks(r.Context(), w, req)
		return
	}
	h.samples(r.Context(), w, req)
}

func decodeReadRequest(body io.Reader) (*prompb.ReadRequest, error) {
	compressed, err := io.ReadAll(io.LimitReader(body, maxReadRequest))
	if err != nil {
		return nil, err
	}
	n, err := snappy.DecodedLen(compressed)
	if err != nil {
		return nil, err
	}
	if n > maxReadRequest {
		return nil, fmt.Errorf("snappy: decoded length %d exceeds limit %d", n, maxReadRequest)
	}
	raw, err := snappy.Decode(nil, compressed)
	if err != nil {
		return nil, err
	}
	var req prompb.ReadRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

// wantsChunks picks the first response type the server knows; none listed
// means samples.
func wantsChunks(accepted []prompb.ReadRequest_ResponseType) (bool, error) {
	if len(accepted) == 0 {
		return false, nil
	}
	for _, t := range accepted {
		switch t {
		case prompb.ReadRequest_SAMPLES:
			return false, nil
		case prompb.ReadRequest_STREAMED_XOR_CHUNKS:
			return true, nil
		}
	}
	return false, fmt.Errorf("server does not support any of the requested response types: %v; supported: %v", accepted,
		map[prompb.ReadRequest_ResponseType]struct{}{prompb.ReadRequest_SAMPLES: {}, prompb.ReadRequest_STREAMED_XOR_CHUNKS: {}})
}

func readParams(q *prompb.Query) ([]*labels.Matcher, *storage.SelectHints, error) {
	ms := make([]*labels.Matcher, 0, len(q.Matchers))
	for _, m := range q.Matchers {
		var t labels.MatchType
		switch m.Type {
		case prompb.LabelMatcher_EQ:
			t = labels.MatchEqual
		case prompb.LabelMatcher_NEQ:
			t = labels.MatchNotEqual
		case prompb.LabelMatcher_RE:
			t = labels.MatchRegexp
		case prompb.LabelMatcher_NRE:
			t = labels.MatchNotRegexp
		default:
			return nil, nil, errors.New("invalid matcher type")
		}
		matcher, err := labels.NewMatcher(t, m.Name, m.Value)
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, matcher)
	}
	if q.Hints == nil {
		return ms, nil, nil
	}
	return ms, &storage.SelectHints{
		Start: q.Hints.StartMs, End: q.Hints.EndMs, Step: q.Hints.StepMs, Func: q.Hints.Func,
		Grouping: q.Hints.Grouping, Range: q.Hints.RangeMs, By: q.Hints.By,
	}, nil
}

func (h *readHandler) samples(ctx context.Context, w http.ResponseWriter, req *prompb.ReadRequest) {
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Header().Set("Content-Encoding", "snappy")
	resp := prompb.ReadResponse{Results: make([]*prompb.QueryResult, len(req.Queries))}
	for i, q := range req.Queries {
		res, err := h.readSamples(ctx, q)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.As(err, new(errReadLimit)) {
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		resp.Results[i] = res
	}
	data, err := proto.Marshal(&resp)
	if err == nil {
		_, err = w.Write(snappy.Encode(nil, data))
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (h *readHandler) readSamples(ctx context.Context, q *prompb.Query) (*prompb.QueryResult, error) {
	ms, hints, err := readParams(q)
	if err != nil {
		return nil, err
	}
	querier, err := h.queryable.Querier(q.StartTimestampMs, q.EndTimestampMs)
	if err != nil {
		return nil, err
	}
	defer h.close(querier)
	ss := querier.Select(ctx, false, hints, ms...)
	res := &prompb.QueryResult{}
	var it chunkenc.Iterator
	n := 0
	for ss.Next() {
		series := ss.At()
		it = series.Iterator(it)
		ts := &prompb.TimeSeries{Labels: prompb.FromLabels(series.Labels(), nil)}
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			if n++; h.sampleLimit > 0 && n > h.sampleLimit {
				return nil, errReadLimit{fmt.Sprintf("exceeded sample limit (%d)", h.sampleLimit)}
			}
			switch vt {
			case chunkenc.ValFloat:
				t, v := it.At()
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: t, Value: v})
			case chunkenc.ValHistogram:
				ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(it.AtHistogram(nil)))
			case chunkenc.ValFloatHistogram:
				ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(it.AtFloatHistogram(nil)))
			default:
				return nil, fmt.Errorf("unrecognized value type: %s", vt)
			}
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		res.Timeseries = append(res.Timeseries, ts)
	}
	h.logWarnings(ss.Warnings())
	return res, ss.Err()
}

func (h *readHandler) streamChunks(ctx context.Context, w http.ResponseWriter, req *prompb.ReadRequest) {
	w.Header().Set("Content-Type", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse")
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "internal http.ResponseWriter does not implement http.Flusher interface", http.StatusInternalServerError)
		return
	}
	fw := &frameWriter{w: w, crc: crc32.MakeTable(crc32.Castagnoli)}
	for i, q := range req.Queries {
		if err := h.streamQuery(ctx, fw, int64(i), q); err != nil {
			if fw.started {
				h.logger.Error("Error streaming remote read response", "err", err, "query_index", i)
				// Returning normally would make the incomplete stream look complete.
				panic(http.ErrAbortHandler)
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	f.Flush()
}

// streamQuery sends the series of one query, at most one series per frame,
// a series split over frames of about maxFrame bytes.
func (h *readHandler) streamQuery(ctx context.Context, fw *frameWriter, index int64, q *prompb.Query) error {
	ms, hints, err := readParams(q)
	if err != nil {
		return err
	}
	querier, err := h.queryable.ChunkQuerier(q.StartTimestampMs, q.EndTimestampMs)
	if err != nil {
		return err
	}
	defer h.close(querier)
	ss := querier.Select(ctx, true, hints, ms...) // the protocol wants series sorted
	var (
		chks []prompb.Chunk
		lbls []prompb.Label
		it   chunks.Iterator
	)
	for ss.Next() {
		series := ss.At()
		it = series.Iterator(it)
		lbls = prompb.FromLabels(series.Labels(), lbls)
		maxData := h.maxFrame
		for _, l := range lbls {
			maxData -= l.Size()
		}
		left := maxData
		for more := it.Next(); more; {
			chk := it.At()
			if chk.Chunk == nil {
				return fmt.Errorf("StreamChunkedReadResponses: found not populated chunk returned by SeriesSet at ref: %v", chk.Ref)
			}
			chks = append(chks, prompb.Chunk{
				MinTimeMs: chk.MinTime, MaxTimeMs: chk.MaxTime,
				Type: prompb.Chunk_Encoding(chk.Chunk.Encoding()), Data: chk.Chunk.Bytes(),
			})
			left -= chks[len(chks)-1].Size()
			if more = it.Next(); left > 0 && more {
				continue
			}
			if err := h.sendFrame(fw, index, lbls, chks); err != nil {
				return err
			}
			chks, left = chks[:0], maxData
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	h.logWarnings(ss.Warnings())
	return ss.Err()
}

func (h *readHandler) sendFrame(fw *frameWriter, index int64, lbls []prompb.Label, chks []prompb.Chunk) error {
	resp := &prompb.ChunkedReadResponse{
		ChunkedSeries: []*prompb.ChunkedSeries{{Labels: lbls, Chunks: chks}},
		QueryIndex:    index,
	}
	b, err := resp.PooledMarshal(&h.marshalPool)
	if err != nil {
		return fmt.Errorf("marshal ChunkedReadResponse: %w", err)
	}
	if err := fw.write(b); err != nil {
		return fmt.Errorf("write to stream: %w", err)
	}
	h.marshalPool.Put(&b)
	return nil
}

func (h *readHandler) close(q interface{ Close() error }) {
	if err := q.Close(); err != nil {
		h.logger.Warn("Error on querier close", "err", err.Error())
	}
}

func (h *readHandler) logWarnings(ws map[string]error) {
	for _, w := range ws {
		h.logger.Warn("Warnings on remote read query", "err", w.Error())
	}
}

// frameWriter writes the frames of a streamed read: the uvarint length,
// the big-endian CRC-32C of the data, the data.
type frameWriter struct {
	w       io.Writer
	crc     *crc32.Table
	started bool // a write may have sent the headers
}

func (fw *frameWriter) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	fw.started = true
	var hdr [binary.MaxVarintLen64 + 4]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	binary.BigEndian.PutUint32(hdr[n:], crc32.Checksum(b, fw.crc))
	if _, err := fw.w.Write(hdr[:n+4]); err != nil {
		return err
	}
	_, err := fw.w.Write(b)
	return err
}
