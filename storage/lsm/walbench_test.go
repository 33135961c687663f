package lsm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shaledb/shale/storage/objstore"
)

// BenchmarkPutDurableStore measures durable writes (64 writers, each
// waiting for its WAL object) against a store whose puts take a fixed time:
// 5 and 40 ms (a quiet and a busy disk's fsyncs: the local folder's put is
// two of them) and 50 ms (an S3 round trip), with the flush
// intervals the server picks for a folder (10 ms) and for S3 (100 ms) and a
// short one on S3 (20 ms). Writers mostly wait, so the figure moves little
// with the machine's load.
//
//	go test -run '^$' -bench BenchmarkPutDurableStore -benchtime 3s -count 2 ./storage/lsm
func BenchmarkPutDurableStore(b *testing.B) {
	value := make([]byte, 100)
	for _, bc := range []struct{ put, interval time.Duration }{
		{5 * time.Millisecond, 10 * time.Millisecond},
		{40 * time.Millisecond, 10 * time.Millisecond},
		{50 * time.Millisecond, 100 * time.Millisecond},
		{50 * time.Millisecond, 20 * time.Millisecond},
	} {
		b.Run(fmt.Sprintf("put=%s/interval=%s", bc.put, bc.interval), func(b *testing.B) {
			fb := objstore.NewFaultBucket(objstore.NewMemoryBucket())
			opts := benchOptions(true)
			opts.WALFlushInterval = bc.interval
			db, err := Open(context.Background(), fb, "bench", opts, Components{})
			if err != nil {
				b.Fatal(err)
			}
			fb.SetOpLatency(objstore.OpPut, bc.put)
			puts, elapsed := parallelPuts(b, db, 64, value)
			b.ReportMetric(float64(puts)/elapsed.Seconds(), "puts/s")
			b.ReportMetric(elapsed.Seconds()*1e3*64/float64(puts), "ms/put")
			fb.SetOpLatency(objstore.OpPut, 0)
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
