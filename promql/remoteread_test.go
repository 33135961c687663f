package promql

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// queryableOnly hides every method of the storage but Querier, as a storage
// without its own ChunkQuerier would look.
type queryableOnly struct{ q storage.Queryable }

func (q queryableOnly) Querier(mint, maxt int64) (storage.Querier, error) {
	return q.q.Querier(mint, maxt)
}

// TestRemoteRead reads samples and streamed chunks through POST /api/v1/read
// from a storage that only offers a sample Querier.
func TestRemoteRead(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, func(_ *Options, c *Components) { c.Queryable = queryableOnly{c.Queryable} })
	base := time.Unix(1_700_000_000, 0)
	appendSeries(t, ts, base, "__name__", "up", "job", "api")

	matcher := labels.MustNewMatcher(labels.MatchEqual, "__name__", "up")
	q, err := remote.ToQuery(base.UnixMilli(), base.Add(time.Hour).UnixMilli(), []*labels.Matcher{matcher}, nil)
	require.NoError(t, err)

	post := func(t *testing.T, rt prompb.ReadRequest_ResponseType) *http.Response {
		t.Helper()
		raw, err := proto.Marshal(&prompb.ReadRequest{Queries: []*prompb.Query{q}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{rt}})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, ts.srv.URL+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, raw)))
		require.NoError(t, err)
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := ts.client.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}

	t.Run("samples", func(t *testing.T) {
		resp := post(t, prompb.ReadRequest_SAMPLES)
		compressed, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		raw, err := snappy.Decode(nil, compressed)
		require.NoError(t, err)
		var rr prompb.ReadResponse
		require.NoError(t, proto.Unmarshal(raw, &rr))
		require.Len(t, rr.Results, 1)
		require.Len(t, rr.Results[0].Timeseries, 1)
		require.Len(t, rr.Results[0].Timeseries[0].Samples, 10)
		require.Equal(t, 9.0, rr.Results[0].Timeseries[0].Samples[9].Value)
	})

	t.Run("streamed chunks", func(t *testing.T) {
		resp := post(t, prompb.ReadRequest_STREAMED_XOR_CHUNKS)
		require.Equal(t, "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse", resp.Header.Get("Content-Type"))
		cr := remote.NewChunkedReader(resp.Body, 1<<20, nil)
		var samples []float64
		for {
			var msg prompb.ChunkedReadResponse
			err := cr.NextProto(&msg)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			for _, s := range msg.ChunkedSeries {
				require.Equal(t, "up", s.Labels[0].Value)
				for _, c := range s.Chunks {
					chk, err := chunkenc.FromData(chunkenc.EncXOR, c.Data)
					require.NoError(t, err)
					it := chk.Iterator(nil)
					for it.Next() == chunkenc.ValFloat {
						_, v := it.At()
						samples = append(samples, v)
					}
					require.NoError(t, it.Err())
				}
			}
		}
		require.Equal(t, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, samples)
	})
}
