package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestGetOrLoadLoadsOnce starts many concurrent misses of one key and holds
// the load until all of them wait for it.
func TestGetOrLoadLoadsOnce(t *testing.T) {
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprintf("disk=%v", disk), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := DefaultOptions()
				o.MemoryBytes = 1 << 20
				if disk {
					o = diskOptions(t)
				}
				c := newTestCache(t, o)
				const waiters = 50
				var loads atomic.Int32
				release := make(chan struct{})
				load := func(context.Context) ([]byte, error) {
					loads.Add(1)
					<-release
					return []byte("block"), nil
				}
				var wg sync.WaitGroup
				results := make([][]byte, waiters)
				errs := make([]error, waiters)
				for i := range waiters {
					wg.Go(func() {
						results[i], errs[i] = c.GetOrLoad(context.Background(), "k", ClassData, load)
					})
				}
				synctest.Wait() // every caller is blocked on the one load
				c.flights.mu.Lock()
				got := c.flights.flights["k"].waiters
				c.flights.mu.Unlock()
				if got != waiters {
					t.Fatalf("%d callers wait for the load, want %d", got, waiters)
				}
				close(release)
				wg.Wait()
				if got := loads.Load(); got != 1 {
					t.Fatalf("load called %d times, want 1", got)
				}
				for i := range waiters {
					if errs[i] != nil || string(results[i]) != "block" {
						t.Fatalf("caller %d: %q, %v", i, results[i], errs[i])
					}
				}
				// Cached: no more loads.
				if v, err := c.GetOrLoad(context.Background(), "k", ClassData, loadFails(t, "k")); err != nil || string(v) != "block" {
					t.Fatalf("after the load: %q, %v", v, err)
				}
			})
		})
	}
}

func TestGetOrLoadErrorsAreSharedNotCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t, DefaultOptions())
		errBoom := errors.New("object store down")
		var loads atomic.Int32
		release := make(chan struct{})
		failing := func(context.Context) ([]byte, error) {
			loads.Add(1)
			<-release
			return nil, errBoom
		}
		const waiters = 20
		var wg sync.WaitGroup
		errs := make([]error, waiters)
		for i := range waiters {
			wg.Go(func() {
				_, errs[i] = c.GetOrLoad(context.Background(), "k", ClassMeta, failing)
			})
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		if loads.Load() != 1 {
			t.Fatalf("load called %d times, want 1", loads.Load())
		}
		for i, err := range errs {
			if !errors.Is(err, errBoom) {
				t.Fatalf("caller %d: err %v, want %v", i, err, errBoom)
			}
		}
		if _, ok := c.Get("k"); ok {
			t.Fatal("a failed load left a block behind")
		}
		v, err := c.GetOrLoad(context.Background(), "k", ClassMeta, func(context.Context) ([]byte, error) {
			loads.Add(1)
			return []byte("ok"), nil
		})
		if err != nil || string(v) != "ok" || loads.Load() != 2 {
			t.Fatalf("retry after an error: %q, %v, %d loads", v, err, loads.Load())
		}
		if s := c.Stats(); s.Loads != 2 || s.LoadErrors != 1 {
			t.Fatalf("stats: %d loads, %d errors; want 2 and 1", s.Loads, s.LoadErrors)
		}
	})
}

func TestGetOrLoadCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t, DefaultOptions())
		release := make(chan struct{})
		var loadCtx context.Context
		load := func(ctx context.Context) ([]byte, error) {
			loadCtx = ctx
			select {
			case <-release:
				return []byte("block"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ctxA, cancelA := context.WithCancel(context.Background())
		errA := make(chan error, 1)
		go func() {
			_, err := c.GetOrLoad(ctxA, "k", ClassData, load)
			errA <- err
		}()
		resB := make(chan []byte, 1)
		go func() {
			v, err := c.GetOrLoad(context.Background(), "k", ClassData, load)
			if err != nil {
				t.Errorf("caller B: %v", err)
			}
			resB <- v
		}()
		synctest.Wait()
		cancelA()
		if err := <-errA; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: err %v, want context.Canceled", err)
		}
		synctest.Wait()
		if loadCtx.Err() != nil {
			t.Fatal("the shared load was cancelled with the first caller")
		}
		close(release)
		if v := <-resB; string(v) != "block" {
			t.Fatalf("caller B got %q", v)
		}
	})
}

func TestGetOrLoadAllWaitersGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t, DefaultOptions())
		loadCancelled := make(chan struct{})
		blocking := func(ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			close(loadCancelled)
			return nil, ctx.Err()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		for range 3 {
			go func() {
				_, err := c.GetOrLoad(ctx, "k", ClassData, blocking)
				done <- err
			}()
		}
		synctest.Wait()
		cancel()
		for range 3 {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
		}
		<-loadCancelled // the load is cancelled once nobody waits for it
		// A new caller starts a new load instead of joining the cancelled one.
		v, err := c.GetOrLoad(context.Background(), "k", ClassData, func(context.Context) ([]byte, error) {
			return []byte("fresh"), nil
		})
		if err != nil || string(v) != "fresh" {
			t.Fatalf("after the cancelled load: %q, %v", v, err)
		}
	})
}

func TestGetOrLoadPanickingLoad(t *testing.T) {
	c := newTestCache(t, DefaultOptions())
	_, err := c.GetOrLoad(context.Background(), "k", ClassData, func(context.Context) ([]byte, error) {
		panic("bad block")
	})
	if err == nil || !strings.Contains(err.Error(), "bad block") {
		t.Fatalf("err %v, want the panic as an error", err)
	}
}

func TestGetOrLoadAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(diskOptions(t), Components{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetOrLoad(context.Background(), "cached", ClassData, func(context.Context) ([]byte, error) {
			return []byte("v"), nil
		}); err != nil {
			t.Fatal(err)
		}
		// Close cancels a running load and waits for it.
		errs := make(chan error)
		go func() {
			_, err := c.GetOrLoad(context.Background(), "slow", ClassData, func(ctx context.Context) ([]byte, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
			errs <- err
		}()
		synctest.Wait()
		c.Close()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("load running at Close: err %v, want context.Canceled", err)
		}
		if _, err := c.GetOrLoad(context.Background(), "new", ClassData, loadFails(t, "new")); !errors.Is(err, ErrClosed) {
			t.Fatalf("miss after Close: err %v, want ErrClosed", err)
		}
		if v, err := c.GetOrLoad(context.Background(), "cached", ClassData, loadFails(t, "cached")); err != nil || string(v) != "v" {
			t.Fatalf("hit after Close: %q, %v", v, err)
		}
		c.Set("late", []byte("x"), ClassData) // RAM only, no panic
		c.Flush()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
