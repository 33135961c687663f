package lsm

import "sync"

// eachParallel calls fn on every item, each in a goroutine of its own and
// at most limit at once, and returns when every call has returned.
func eachParallel[T any](items []T, limit int, fn func(T)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for _, item := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(item)
		}()
	}
	wg.Wait()
}
