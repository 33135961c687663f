package objstore_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/shaledb/shale/storage/objstore"
	"github.com/shaledb/shale/storage/objstore/objstoretest"
)

// go test -run '^$' -bench 'BenchmarkS3' -benchtime=100x ./storage/objstore/
func BenchmarkS3Put(b *testing.B) {
	bucket := objstoretest.NewS3Bucket(b, nil)
	for _, size := range []int{4 << 10, 1 << 20, objstore.MinS3PartSize + 1} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			data := bytes.Repeat([]byte("x"), size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := objstore.PutBytes(b.Context(), bucket, "obj", data, objstore.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkS3GetRange(b *testing.B) {
	bucket := objstoretest.NewS3Bucket(b, nil)
	objstore.PutBytes(b.Context(), bucket, "obj", bytes.Repeat([]byte("z"), 1<<20), objstore.PutOptions{})
	for _, size := range []int64{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := objstore.ReadRange(b.Context(), bucket, "obj", 4096, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
