package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func newRetryTest(t *testing.T, cfg RetryConfig) (*MemoryBucket, *FaultBucket, *RetryingBucket) {
	t.Helper()
	mem := NewMemoryBucket()
	fault := NewFaultBucket(mem)
	r := NewRetryingBucket(fault, cfg)
	r.jitter = func(max time.Duration) time.Duration { return max } // deterministic waits
	return mem, fault, r
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

func TestRetryTransientUpToMaxAttempts(t *testing.T) {
	for _, op := range Ops {
		for _, tc := range []struct {
			failures, maxAttempts int
			wantCalls             int64
			wantErr               bool
		}{
			{failures: 0, maxAttempts: 3, wantCalls: 1},
			{failures: 2, maxAttempts: 3, wantCalls: 3},
			{failures: 3, maxAttempts: 3, wantCalls: 3, wantErr: true},
			{failures: 10, maxAttempts: 4, wantCalls: 4, wantErr: true},
			{failures: 1, maxAttempts: 1, wantCalls: 1, wantErr: true},
		} {
			t.Run(fmt.Sprintf("op=%s/failures=%d/max=%d", op, tc.failures, tc.maxAttempts), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					mem, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: tc.maxAttempts, MinBackoff: time.Millisecond, MaxBackoff: time.Second})
					PutBytes(t.Context(), mem, "obj", []byte("payload"), PutOptions{})
					fault.FailNext(op, tc.failures, nil)
					err := call(t.Context(), r, op)
					if got := fault.Requests(op); got != tc.wantCalls {
						t.Errorf("%d calls, want %d", got, tc.wantCalls)
					}
					if tc.wantErr != (err != nil) {
						t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
					}
					if err != nil && (!IsTransient(err) || !errors.Is(err, ErrInjected)) {
						t.Fatalf("err = %v lost its cause", err)
					}
				})
			})
		}
	}
}

func TestRetryStopsOnPermanentErrors(t *testing.T) {
	for _, sentinel := range []error{ErrNotFound, ErrPreconditionFailed, ErrInvalidRange, errors.New("disk full")} {
		for _, op := range Ops {
			t.Run(fmt.Sprintf("err=%v/op=%s", sentinel, op), func(t *testing.T) {
				_, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: 5})
				fault.FailNext(op, 3, sentinel)
				err := call(t.Context(), r, op)
				if !errors.Is(err, sentinel) {
					t.Fatalf("err = %v, want %v", err, sentinel)
				}
				if n := fault.Requests(op); n != 1 {
					t.Fatalf("%d calls, want 1", n)
				}
			})
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: 6, MinBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond})
		fault.FailNext(OpList, 10, nil)
		start := time.Now()
		err := call(t.Context(), r, OpList)
		if !IsTransient(err) || !strings.Contains(err.Error(), "gave up after 6 attempts") {
			t.Fatalf("err = %v", err)
		}
		// Caps 100, 200, 300, 300, 300 ms, and the test's jitter waits the cap.
		if got, want := time.Since(start), 1200*time.Millisecond; got != want {
			t.Fatalf("waited %v, want %v", got, want)
		}
	})
}

func TestFullJitter(t *testing.T) {
	const max = time.Second
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := fullJitter(max)
		if d < 0 || d >= max {
			t.Fatalf("jitter %v outside [0, %v)", d, max)
		}
		seen[d] = true
	}
	if len(seen) < 900 {
		t.Fatalf("only %d distinct waits in 1000", len(seen))
	}
	if d := fullJitter(0); d != 0 {
		t.Fatalf("fullJitter(0) = %v", d)
	}
}

func TestRetryHonoursContext(t *testing.T) {
	t.Run("deadline while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: 5, MinBackoff: time.Hour, MaxBackoff: time.Hour})
			fault.FailNext(OpGet, 10, nil)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			err := call(ctx, r, OpGet)
			if !errors.Is(err, context.DeadlineExceeded) || !IsTransient(err) {
				t.Fatalf("err = %v, want the deadline and the last transient error", err)
			}
			if waited := time.Since(start); waited != time.Second {
				t.Fatalf("returned after %v, want 1s", waited)
			}
			if n := fault.Requests(OpGet); n != 1 {
				t.Fatalf("%d calls, want 1", n)
			}
		})
	})
	t.Run("canceled before", func(t *testing.T) {
		_, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: 5})
		fault.FailNext(OpGet, 10, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := call(ctx, r, OpGet); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if n := fault.Requests(OpGet); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
}

// halfReadBucket consumes part of a Put's body and then fails transiently,
// the first fails times.
type halfReadBucket struct {
	*MemoryBucket
	fails int
	calls int
}

func (h *halfReadBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	h.calls++
	if h.fails > 0 {
		h.fails--
		io.ReadFull(r, make([]byte, 3))
		return Attributes{}, Transient(errors.New("connection reset"))
	}
	return h.MemoryBucket.Put(ctx, name, r, size, opts)
}

func TestRetryPutReplaysBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &halfReadBucket{MemoryBucket: NewMemoryBucket(), fails: 2}
		r := NewRetryingBucket(inner, RetryConfig{MaxAttempts: 5})
		body := bytes.NewReader([]byte("xxabcdefgh"))
		body.Seek(2, io.SeekStart) // the body starts where the reader stands
		if _, err := r.Put(t.Context(), "obj", body, 8, PutOptions{}); err != nil {
			t.Fatal(err)
		}
		got, _ := ReadAll(t.Context(), inner, "obj")
		if string(got) != "abcdefgh" || inner.calls != 3 {
			t.Fatalf("stored %q after %d calls", got, inner.calls)
		}
	})
}

func TestRetryPutNonSeekableBodyOnce(t *testing.T) {
	inner := &halfReadBucket{MemoryBucket: NewMemoryBucket(), fails: 1}
	r := NewRetryingBucket(inner, RetryConfig{MaxAttempts: 5})
	_, err := r.Put(t.Context(), "obj", io.MultiReader(strings.NewReader("abcdefgh")), 8, PutOptions{})
	if !IsTransient(err) || inner.calls != 1 {
		t.Fatalf("err = %v after %d calls; want one transient failure", err, inner.calls)
	}
}

func TestRetryConditionalPutAmbiguity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, fault, r := newRetryTest(t, RetryConfig{MaxAttempts: 3})
		fault.ApplyThenFailNext(OpPut, 1, nil)
		_, err := PutBytes(t.Context(), r, "fence", []byte("me"), PutOptions{IfAbsent: true})
		if !IsPreconditionFailed(err) || !strings.Contains(err.Error(), "may have been applied") {
			t.Fatalf("err = %v", err)
		}
		if got, _ := ReadAll(t.Context(), mem, "fence"); string(got) != "me" {
			t.Fatalf("content %q", got)
		}
	})
}

func TestRetryConfig(t *testing.T) {
	if err := DefaultRetryConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []RetryConfig{
		{MaxAttempts: 0, MinBackoff: 1, MaxBackoff: 1},
		{MaxAttempts: 1, MinBackoff: 0, MaxBackoff: 1},
		{MaxAttempts: 1, MinBackoff: 2, MaxBackoff: 1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	r := NewRetryingBucket(NewMemoryBucket(), RetryConfig{MinBackoff: time.Second, MaxBackoff: time.Millisecond})
	if r.cfg.MaxAttempts != DefaultRetryConfig().MaxAttempts || r.cfg.MaxBackoff != time.Second {
		t.Fatalf("defaults not applied: %+v", r.cfg)
	}
}
