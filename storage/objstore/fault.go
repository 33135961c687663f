package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// ErrInjected is the cause of every failure a FaultBucket makes up without
// being given an error.
var ErrInjected = errors.New("injected fault")

// Fault is one failure rule of a FaultBucket.
type Fault struct {
	// Ops are the operations the rule applies to; empty means all.
	Ops []Op
	// Match, if set, limits the rule to the calls for which it returns true.
	// name is the object name (for List, the prefix). It runs under the
	// bucket's lock and must not call the FaultBucket.
	Match func(op Op, name string) bool
	// Err is the error to report, wrapped; nil reports ErrInjected marked
	// transient.
	Err error
	// Times is how many calls may fail by this rule; 0 means no limit.
	Times int
	// Probability, if in (0, 1), makes each matching call fail with that
	// probability, drawn from the bucket's seeded source; otherwise every
	// matching call fails.
	Probability float64
	// AfterApply passes the call on to the inner bucket first and reports the
	// failure after it took effect: a write that happened but whose answer
	// was lost.
	AfterApply bool
	// Corrupt makes a matching Get or GetRange succeed with one bit of the
	// bytes it returns flipped, as an answer spoiled on the way; Err and
	// AfterApply are then unused. Other operations it leaves alone.
	Corrupt bool
}

type faultRule struct {
	Fault
	left int // calls that may still fail; -1: unlimited
}

// FaultBucket wraps a bucket and injects failures and latency into its calls,
// for tests. It counts the calls it sees per operation. All methods are safe
// for concurrent use, and the rules may change while calls are in flight.
type FaultBucket struct {
	inner Bucket

	mu        sync.Mutex
	rules     []*faultRule
	rng       *rand.Rand
	latency   time.Duration
	opLatency map[Op]time.Duration
	requests  map[Op]int64
	injected  map[Op]int64
}

// NewFaultBucket wraps b with no faults, no latency and seed 1.
func NewFaultBucket(b Bucket) *FaultBucket {
	return &FaultBucket{
		inner:     b,
		rng:       rand.New(rand.NewPCG(1, 1)),
		opLatency: map[Op]time.Duration{},
		requests:  map[Op]int64{},
		injected:  map[Op]int64{},
	}
}

// Seed resets the source of the probabilistic faults.
func (f *FaultBucket) Seed(seed uint64) {
	f.mu.Lock()
	f.rng = rand.New(rand.NewPCG(seed, seed))
	f.mu.Unlock()
}

// Inject adds a rule; rules are tried in the order added and the first one
// that fires decides. remove takes the rule out again.
func (f *FaultBucket) Inject(fault Fault) (remove func()) {
	r := &faultRule{Fault: fault, left: -1}
	if fault.Times > 0 {
		r.left = fault.Times
	}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.rules = slices.DeleteFunc(f.rules, func(x *faultRule) bool { return x == r })
		f.mu.Unlock()
	}
}

// FailNext makes the next n calls of op fail with err (nil: transient).
func (f *FaultBucket) FailNext(op Op, n int, err error) {
	if n > 0 {
		f.Inject(Fault{Ops: []Op{op}, Err: err, Times: n})
	}
}

// FailWithProbability makes each call of op fail with probability p.
func (f *FaultBucket) FailWithProbability(op Op, p float64, err error) {
	f.Inject(Fault{Ops: []Op{op}, Err: err, Probability: p})
}

// FailMatching makes every call for which match returns true fail.
func (f *FaultBucket) FailMatching(match func(op Op, name string) bool, err error) {
	f.Inject(Fault{Match: match, Err: err})
}

// ApplyThenFailNext makes the next n calls of op take effect and then report
// err (nil: transient), as when the answer to a successful write is lost.
func (f *FaultBucket) ApplyThenFailNext(op Op, n int, err error) {
	if n > 0 {
		f.Inject(Fault{Ops: []Op{op}, Err: err, Times: n, AfterApply: true})
	}
}

// ClearFaults removes every rule; latency stays.
func (f *FaultBucket) ClearFaults() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

// SetLatency delays every call by d before it runs (0 removes the delay).
// A per-operation latency, if set, takes precedence.
func (f *FaultBucket) SetLatency(d time.Duration) {
	f.mu.Lock()
	f.latency = d
	f.mu.Unlock()
}

// SetOpLatency delays every call of op by d; a negative d removes the
// override, so SetLatency's value applies again.
func (f *FaultBucket) SetOpLatency(op Op, d time.Duration) {
	f.mu.Lock()
	if d < 0 {
		delete(f.opLatency, op)
	} else {
		f.opLatency[op] = d
	}
	f.mu.Unlock()
}

// Requests returns how many calls of op the bucket has seen, failed ones included.
func (f *FaultBucket) Requests(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// Injected returns how many calls of op failed by a rule.
func (f *FaultBucket) Injected(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[op]
}

// ResetCounts sets all request and injection counts to zero.
func (f *FaultBucket) ResetCounts() {
	f.mu.Lock()
	clear(f.requests)
	clear(f.injected)
	f.mu.Unlock()
}

// verdict is what before decided for one call.
type verdict struct {
	injected error   // the error to report (nil: none)
	apply    bool    // whether to apply the call to the inner bucket
	spoil    bool    // whether to flip a bit of what a read returns
	at       float64 // where, as a fraction of its length
}

// before counts the call, waits the latency and decides what happens to it.
func (f *FaultBucket) before(ctx context.Context, op Op, name string) (verdict, error) {
	f.mu.Lock()
	f.requests[op]++
	delay, ok := f.opLatency[op]
	if !ok {
		delay = f.latency
	}
	f.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return verdict{}, fmt.Errorf("%s %s: %w", op, name, err)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return verdict{}, fmt.Errorf("%s %s: %w", op, name, ctx.Err())
		case <-t.C:
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.left == 0 || (len(r.Ops) > 0 && !slices.Contains(r.Ops, op)) {
			continue
		}
		if r.Corrupt && op != OpGet && op != OpGetRange {
			continue
		}
		if r.Match != nil && !r.Match(op, name) {
			continue
		}
		if r.Probability > 0 && r.Probability < 1 && f.rng.Float64() >= r.Probability {
			continue
		}
		if r.left > 0 {
			r.left--
		}
		f.injected[op]++
		if r.Corrupt {
			return verdict{apply: true, spoil: true, at: f.rng.Float64()}, nil
		}
		v := verdict{apply: r.AfterApply}
		if r.Err == nil {
			v.injected = fmt.Errorf("%s %s: %w: %w", op, name, ErrTransient, ErrInjected)
		} else {
			v.injected = fmt.Errorf("%s %s: injected: %w", op, name, r.Err)
		}
		return v, nil
	}
	return verdict{apply: true}, nil
}

func (f *FaultBucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return f.read(ctx, OpGet, name, func() (io.ReadCloser, error) { return f.inner.Get(ctx, name) })
}

func (f *FaultBucket) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	return f.read(ctx, OpGetRange, name, func() (io.ReadCloser, error) { return f.inner.GetRange(ctx, name, off, length) })
}

// read is Get and GetRange: open, called unless a fault says not to apply
// the operation, opens the reader; an injected error closes it.
func (f *FaultBucket) read(ctx context.Context, op Op, name string, open func() (io.ReadCloser, error)) (io.ReadCloser, error) {
	v, err := f.before(ctx, op, name)
	if err != nil {
		return nil, err
	}
	var rc io.ReadCloser
	if v.apply {
		if rc, err = open(); err != nil {
			return nil, err
		}
	}
	if v.injected != nil {
		if rc != nil {
			rc.Close()
		}
		return nil, v.injected
	}
	if v.spoil {
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			bit := int(v.at * float64(8*len(b)))
			b[bit/8] ^= 1 << (bit % 8)
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return rc, nil
}

// faulted is Attributes, Put and List: call, made unless a fault says not to
// apply the operation, performs it on the inner bucket; an injected error
// takes the place of its result.
func faulted[T any](ctx context.Context, f *FaultBucket, op Op, name string, call func() (T, error)) (T, error) {
	var zero T
	vd, err := f.before(ctx, op, name)
	if err != nil {
		return zero, err
	}
	var v T
	if vd.apply {
		if v, err = call(); err != nil {
			return zero, err
		}
	}
	if vd.injected != nil {
		return zero, vd.injected
	}
	return v, nil
}

func (f *FaultBucket) Attributes(ctx context.Context, name string) (Attributes, error) {
	return faulted(ctx, f, OpAttributes, name, func() (Attributes, error) { return f.inner.Attributes(ctx, name) })
}

func (f *FaultBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (Attributes, error) {
	return faulted(ctx, f, OpPut, name, func() (Attributes, error) { return f.inner.Put(ctx, name, r, size, opts) })
}

func (f *FaultBucket) Delete(ctx context.Context, name string) error {
	v, err := f.before(ctx, OpDelete, name)
	if err != nil {
		return err
	}
	if v.apply {
		if err := f.inner.Delete(ctx, name); err != nil {
			return err
		}
	}
	return v.injected
}

func (f *FaultBucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	return faulted(ctx, f, OpList, prefix, func() (ListPage, error) { return f.inner.List(ctx, prefix, startAfter, limit) })
}

// Close closes the inner bucket.
func (f *FaultBucket) Close() error { return f.inner.Close() }
