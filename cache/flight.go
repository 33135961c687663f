package cache

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// flightGroup runs one load per key at a time and shares its result with
// every caller that asks for the key while it runs.
//
// A load runs on a goroutine of its own under a context that keeps the first
// caller's values but not its cancellation. A caller whose context ends stops
// waiting and returns ctx.Err(); the load goes on for the others, and is
// cancelled only when no caller waits for it any more. Results, errors
// included, are forgotten once the load returns.
type flightGroup struct {
	mu      sync.Mutex
	flights map[string]*flight
	closed  bool
	running sync.WaitGroup
}

type flight struct {
	done    chan struct{} // closed when val and err are set
	val     []byte
	err     error
	waiters int // guarded by flightGroup.mu
	cancel  context.CancelFunc
}

// do returns the result of fn for key, calling it unless a call for key is
// already running.
func (g *flightGroup) do(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	f, ok := g.flights[key]
	if !ok {
		if g.flights == nil {
			g.flights = make(map[string]*flight)
		}
		loadCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		g.flights[key] = f
		g.running.Add(1)
		go g.run(loadCtx, key, f, fn)
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	f.waiters--
	if f.waiters == 0 {
		f.cancel()
		// A later caller must not join a load that is being cancelled.
		if g.flights[key] == f {
			delete(g.flights, key)
		}
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.val, f.err // finished meanwhile: the result is as good
	default:
		return nil, ctx.Err()
	}
}

func (g *flightGroup) run(ctx context.Context, key string, f *flight, fn func(context.Context) ([]byte, error)) {
	defer g.running.Done()
	defer f.cancel()
	val, err := callLoad(ctx, fn)
	g.mu.Lock()
	if g.flights[key] == f {
		delete(g.flights, key)
	}
	f.val, f.err = val, err
	g.mu.Unlock()
	close(f.done)
}

// callLoad calls fn, turning a panic into an error: the load runs on a
// goroutine of the cache, where a panic could not be recovered by the caller.
func callLoad(ctx context.Context, fn func(context.Context) ([]byte, error)) (val []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cache: load panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

// close cancels running loads, waits for them to return and makes later
// calls fail with ErrClosed.
func (g *flightGroup) close() {
	g.mu.Lock()
	g.closed = true
	for _, f := range g.flights {
		f.cancel()
	}
	g.mu.Unlock()
	g.running.Wait()
}
