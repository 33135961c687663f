package objstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/shaledb/shale/internal/cputime"
)

// The S3 backend is benchmarked with the acceptance tests' server, from
// package objstore_test (BenchmarkS3*).

// go test -run '^$' -bench 'BenchmarkFilesystem' -benchtime=200x ./storage/objstore/
func BenchmarkFilesystemPut(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			fsb, err := NewFilesystemBucket(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			data := bytes.Repeat([]byte("x"), size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := PutBytes(b.Context(), fsb, fmt.Sprintf("d/%d", i%64), data, PutOptions{}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// The WAL's puts: objects of 180 KiB created if absent, eight at a time, in
// a folder that holds a few thousand. cpu-us/op is the process's CPU time a
// put (the kernel's work on the files included).
//
//	go test -run '^$' -bench 'BenchmarkFilesystemWALPut' -benchtime=2000x -count 6 ./storage/objstore/
func BenchmarkFilesystemWALPut(b *testing.B) {
	fsb, err := NewFilesystemBucket(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("wal record "), 180<<10/11)
	for i := range 3000 {
		if _, err := PutBytes(b.Context(), fsb, fmt.Sprintf("wal/old-%08d", i), data[:1000], PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var id atomic.Int64
	b.SetBytes(int64(len(data)))
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.ResetTimer()
	cpu0 := cputime.Process()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := PutBytes(b.Context(), fsb, fmt.Sprintf("wal/%08d", id.Add(1)), data, PutOptions{IfAbsent: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((cputime.Process()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// Attributes with the ETag stored on the inode against hashing the file.
func BenchmarkFilesystemAttributes(b *testing.B) {
	const size = 16 << 20
	for _, etag := range []string{"xattr", "hash"} {
		b.Run("etag="+etag+fmt.Sprintf("/size=%d", size), func(b *testing.B) {
			fsb, err := NewFilesystemBucket(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			data := bytes.Repeat([]byte("y"), size)
			if etag == "xattr" {
				PutBytes(b.Context(), fsb, "obj", data, PutOptions{})
				if fsb.noXattr.Load() {
					b.Skip("no extended attributes here")
				}
			} else if err := os.WriteFile(filepath.Join(fsb.Dir(), "obj"), data, 0o644); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fsb.Attributes(b.Context(), "obj"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFilesystemGetRange(b *testing.B) {
	fsb, err := NewFilesystemBucket(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	PutBytes(b.Context(), fsb, "obj", bytes.Repeat([]byte("z"), 1<<20), PutOptions{})
	for _, size := range []int64{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			off := int64(0)
			for b.Loop() {
				if _, err := ReadRange(b.Context(), fsb, "obj", off, size); err != nil {
					b.Fatal(err)
				}
				off = (off + size) % (1 << 20)
			}
		})
	}
}

func BenchmarkFilesystemList(b *testing.B) {
	const objects = 2000
	for _, layout := range []string{"flat", "nested"} {
		b.Run("layout="+layout, func(b *testing.B) {
			fsb, err := NewFilesystemBucket(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for i := range objects {
				name := fmt.Sprintf("sst/%06d.sst", i)
				if layout == "nested" {
					name = fmt.Sprintf("p/%02d/sst/%06d.sst", i%40, i)
				}
				PutBytes(b.Context(), fsb, name, []byte("v"), PutOptions{})
			}
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				if err := Iter(b.Context(), fsb, "", func(Attributes) error { n++; return nil }); err != nil || n != objects {
					b.Fatalf("listed %d, %v", n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*objects), "ns/object")
		})
	}
}
