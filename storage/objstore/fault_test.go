package objstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestFaultFailNext(t *testing.T) {
	mem := NewMemoryBucket()
	f := NewFaultBucket(mem)
	boom := errors.New("boom")
	f.FailNext(OpPut, 2, boom)
	for i, wantErr := range []bool{true, true, false} {
		_, err := PutBytes(t.Context(), f, "x", []byte("v"), PutOptions{})
		if (err != nil) != wantErr || (err != nil && !errors.Is(err, boom)) {
			t.Fatalf("put #%d: err = %v", i, err)
		}
	}
	if f.Requests(OpPut) != 3 || f.Injected(OpPut) != 2 || f.Requests(OpGet) != 0 {
		t.Fatalf("requests %d, injected %d", f.Requests(OpPut), f.Injected(OpPut))
	}
	// A failed put did not reach the inner bucket; the third did.
	if _, err := mem.Attributes(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
	f.ResetCounts()
	if f.Requests(OpPut) != 0 || f.Injected(OpPut) != 0 {
		t.Fatal("counts not reset")
	}
}

func TestFaultDefaultErrorIsTransient(t *testing.T) {
	f := NewFaultBucket(NewMemoryBucket())
	f.FailNext(OpList, 1, nil)
	_, err := f.List(t.Context(), "", "", 0)
	if !IsTransient(err) || !errors.Is(err, ErrInjected) {
		t.Fatalf("err = %v", err)
	}
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	pattern := func(seed uint64) string {
		mem := NewMemoryBucket()
		PutBytes(context.Background(), mem, "x", nil, PutOptions{})
		f := NewFaultBucket(mem)
		f.Seed(seed)
		f.FailWithProbability(OpAttributes, 0.3, ErrNotFound)
		var b strings.Builder
		for range 1000 {
			if _, err := f.Attributes(context.Background(), "x"); IsNotFound(err) {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		if got := f.Injected(OpAttributes); got != int64(strings.Count(b.String(), "x")) {
			t.Fatalf("Injected = %d, but %d calls failed", got, strings.Count(b.String(), "x"))
		}
		return b.String()
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	if a != b {
		t.Fatal("same seed, different failures")
	}
	if a == c {
		t.Fatal("different seeds, same failures")
	}
	if n := strings.Count(a, "x"); n < 220 || n > 380 {
		t.Fatalf("%d of 1000 calls failed with p=0.3", n)
	}
}

func TestFaultMatching(t *testing.T) {
	mem := NewMemoryBucket()
	f := NewFaultBucket(mem)
	PutBytes(t.Context(), mem, "wal/1", []byte("a"), PutOptions{})
	PutBytes(t.Context(), mem, "sst/1", []byte("b"), PutOptions{})
	f.FailMatching(func(op Op, name string) bool { return op == OpGet && strings.HasPrefix(name, "wal/") }, ErrTransient)
	if _, err := ReadAll(t.Context(), f, "wal/1"); !IsTransient(err) {
		t.Fatalf("wal get: %v", err)
	}
	if _, err := ReadAll(t.Context(), f, "sst/1"); err != nil {
		t.Fatalf("sst get: %v", err)
	}
	if _, err := f.Attributes(t.Context(), "wal/1"); err != nil {
		t.Fatalf("wal attributes: %v", err)
	}
	f.ClearFaults()
	if _, err := ReadAll(t.Context(), f, "wal/1"); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestFaultInjectRemove(t *testing.T) {
	f := NewFaultBucket(NewMemoryBucket())
	remove := f.Inject(Fault{Ops: []Op{OpDelete, OpList}})
	if err := f.Delete(t.Context(), "x"); !errors.Is(err, ErrInjected) {
		t.Fatalf("delete: %v", err)
	}
	if _, err := f.List(t.Context(), "", "", 0); !errors.Is(err, ErrInjected) {
		t.Fatalf("list: %v", err)
	}
	if _, err := f.Attributes(t.Context(), "x"); !IsNotFound(err) {
		t.Fatalf("attributes: %v", err)
	}
	remove()
	if err := f.Delete(t.Context(), "x"); err != nil {
		t.Fatalf("delete after remove: %v", err)
	}
}

func TestFaultApplyThenFail(t *testing.T) {
	mem := NewMemoryBucket()
	f := NewFaultBucket(mem)
	f.ApplyThenFailNext(OpPut, 1, nil)
	_, err := PutBytes(t.Context(), f, "m/1", []byte("applied"), PutOptions{IfAbsent: true})
	if !IsTransient(err) {
		t.Fatalf("err = %v", err)
	}
	if got, err := ReadAll(t.Context(), mem, "m/1"); err != nil || string(got) != "applied" {
		t.Fatalf("inner has %q, %v; the put should have been applied", got, err)
	}
	f.ApplyThenFailNext(OpDelete, 1, nil)
	if err := f.Delete(t.Context(), "m/1"); !IsTransient(err) {
		t.Fatalf("delete err = %v", err)
	}
	if _, err := mem.Attributes(t.Context(), "m/1"); !IsNotFound(err) {
		t.Fatalf("delete not applied: %v", err)
	}
}

// A Corrupt rule spoils the bytes of reads by one bit, Times of them, and
// leaves the other operations and the stored object alone.
func TestFaultCorrupt(t *testing.T) {
	ctx := t.Context()
	mem := NewMemoryBucket()
	f := NewFaultBucket(mem)
	want := []byte("the bytes as they are stored")
	if _, err := PutBytes(ctx, f, "x", want, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Inject(Fault{Corrupt: true, Times: 2})
	if _, err := f.Attributes(ctx, "x"); err != nil {
		t.Fatalf("attributes: %v", err)
	}
	bitsOff := func(got []byte, want []byte) int {
		n := 0
		for i := range got {
			for x := got[i] ^ want[i]; x != 0; x &= x - 1 {
				n++
			}
		}
		return n
	}
	got, err := ReadAll(ctx, f, "x")
	if err != nil || len(got) != len(want) || bitsOff(got, want) != 1 {
		t.Fatalf("spoiled get: %q, %v; want one bit off %q", got, err, want)
	}
	got, err = ReadRange(ctx, f, "x", 4, 5)
	if err != nil || len(got) != 5 || bitsOff(got, want[4:9]) != 1 {
		t.Fatalf("spoiled ranged get: %q, %v; want one bit off %q", got, err, want[4:9])
	}
	if got, err := ReadAll(ctx, f, "x"); err != nil || string(got) != string(want) {
		t.Fatalf("third get: %q, %v; want the stored bytes", got, err)
	}
	if f.Injected(OpGet) != 1 || f.Injected(OpGetRange) != 1 || f.Injected(OpAttributes) != 0 {
		t.Errorf("injected get %d, ranged %d, attributes %d; want 1, 1, 0",
			f.Injected(OpGet), f.Injected(OpGetRange), f.Injected(OpAttributes))
	}
}

func TestFaultLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFaultBucket(NewMemoryBucket())
		f.SetLatency(50 * time.Millisecond)
		f.SetOpLatency(OpList, 5*time.Millisecond)
		for _, tc := range []struct {
			op   Op
			want time.Duration
		}{{OpAttributes, 50 * time.Millisecond}, {OpPut, 50 * time.Millisecond}, {OpList, 5 * time.Millisecond}} {
			start := time.Now()
			call(t.Context(), f, tc.op)
			if got := time.Since(start); got != tc.want {
				t.Errorf("%s took %v, want %v", tc.op, got, tc.want)
			}
		}
		f.SetOpLatency(OpList, -1)
		start := time.Now()
		call(t.Context(), f, OpList)
		if got := time.Since(start); got != 50*time.Millisecond {
			t.Errorf("list after removing its override took %v", got)
		}

		// A request waiting out its latency gives up when its context ends.
		f.SetLatency(time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		_, err := f.Get(ctx, "x")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("err = %v after %v", err, time.Since(start))
		}
	})
}

func TestFaultConcurrentUse(t *testing.T) {
	f := NewFaultBucket(NewMemoryBucket())
	f.FailWithProbability(OpPut, 0.5, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := PutBytes(context.Background(), f, "k", []byte("v"), PutOptions{}); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			f.Inject(Fault{Ops: []Op{OpGet}, Times: 1})()
			f.SetLatency(0)
			f.Requests(OpPut)
		}
	})
	wg.Wait()
	if f.Requests(OpPut) != 400 || f.Injected(OpPut) != int64(failed) {
		t.Fatalf("requests %d, injected %d, failed %d", f.Requests(OpPut), f.Injected(OpPut), failed)
	}
}

// call runs op once against b on the object "obj".
func call(ctx context.Context, b Bucket, op Op) error {
	var err error
	switch op {
	case OpGet:
		var rc io.ReadCloser
		if rc, err = b.Get(ctx, "obj"); err == nil {
			rc.Close()
		}
	case OpGetRange:
		var rc io.ReadCloser
		if rc, err = b.GetRange(ctx, "obj", 1, 2); err == nil {
			rc.Close()
		}
	case OpAttributes:
		_, err = b.Attributes(ctx, "obj")
	case OpPut:
		_, err = PutBytes(ctx, b, "obj", []byte("payload"), PutOptions{})
	case OpDelete:
		err = b.Delete(ctx, "obj")
	case OpList:
		_, err = b.List(ctx, "", "", 0)
	}
	return err
}
