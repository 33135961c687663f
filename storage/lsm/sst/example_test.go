package sst_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/shaledb/shale/storage/lsm/sst"
)

func Example() {
	var buf bytes.Buffer
	w := sst.NewWriter(&buf, sst.DefaultWriterOptions())
	for _, e := range []sst.Entry{
		{Key: []byte("a"), Seq: 3, Kind: sst.KindPut, Value: []byte("apple")},
		{Key: []byte("b"), Seq: 5, Kind: sst.KindMerge, Value: []byte("+1")},
		{Key: []byte("b"), Seq: 4, Kind: sst.KindPut, Value: []byte("banana")},
		{Key: []byte("c"), Seq: 6, Kind: sst.KindDelete},
	} {
		if err := w.Add(e); err != nil {
			panic(err)
		}
	}
	info, err := w.Finish()
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	t, err := sst.Open(ctx, sst.BytesReadable(buf.Bytes()), "example.sst", nil)
	if err != nil {
		panic(err)
	}
	got, err := t.Get(ctx, []byte("b"), nil)
	if err != nil {
		panic(err)
	}
	for _, e := range got {
		fmt.Printf("get %s seq=%d %v %q\n", e.Key, e.Seq, e.Kind, e.Value)
	}
	it := t.NewIter(ctx, []byte("b"), nil)
	for ok := it.First(); ok; ok = it.Next() {
		e := it.Entry()
		fmt.Printf("iter %s seq=%d %v\n", e.Key, e.Seq, e.Kind)
	}
	if err := it.Close(); err != nil {
		panic(err)
	}
	fmt.Println(info.NumEntries, "entries,", string(info.SmallestKey), "to", string(info.LargestKey))
	// Output:
	// get b seq=5 merge "+1"
	// get b seq=4 put "banana"
	// iter b seq=5 merge
	// iter b seq=4 put
	// iter c seq=6 delete
	// 4 entries, a to c
}
