package lsm_test

import (
	"context"
	"fmt"

	"github.com/shaledb/shale/storage/lsm"
	"github.com/shaledb/shale/storage/objstore"
)

func Example() {
	ctx := context.Background()
	bucket := objstore.NewMemoryBucket()
	appendOp := func(_, existing []byte, operands [][]byte) ([]byte, error) {
		out := append([]byte(nil), existing...)
		for _, op := range operands {
			out = append(out, op...)
		}
		return out, nil
	}
	db, err := lsm.Open(ctx, bucket, "example", lsm.DefaultOptions(), lsm.Components{Merge: appendOp})
	if err != nil {
		panic(err)
	}
	var b lsm.Batch
	b.Put([]byte("a/1"), []byte("x"))
	b.Merge([]byte("a/1"), []byte("y"))
	b.Put([]byte("a/2"), []byte("z"))
	b.Put([]byte("b/1"), []byte("w"))
	// With the WAL on, the default waits until the batch is in a WAL object.
	if err := db.Write(ctx, &b, db.DefaultWriteOptions()); err != nil {
		panic(err)
	}
	v, ok, _ := db.Get(ctx, []byte("a/1"))
	fmt.Println(string(v), ok)

	it, _ := db.NewIterator(ctx, []byte("a/"), lsm.PrefixUpperBound([]byte("a/")))
	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("%s=%s\n", it.Key(), it.Value())
	}
	if err := it.Close(); err != nil {
		panic(err)
	}
	if err := db.Close(); err != nil {
		panic(err)
	}
	// Output:
	// xy true
	// a/1=xy
	// a/2=z
}
