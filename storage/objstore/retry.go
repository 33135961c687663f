package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// RetryConfig says how a RetryingBucket retries transient failures.
type RetryConfig struct {
	// MaxAttempts is the most calls made for one operation, the first
	// included; 1 disables retries.
	MaxAttempts int `yaml:"max_attempts"`
	// MinBackoff caps the wait before the first retry; the cap doubles with
	// every retry up to MaxBackoff. The wait is uniformly random in
	// [0, cap) ("full jitter"), so clients that failed together spread out.
	MinBackoff time.Duration `yaml:"min_backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// DefaultRetryConfig returns 5 attempts with backoff capped between 50 ms and 5 s.
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{MaxAttempts: 5, MinBackoff: 50 * time.Millisecond, MaxBackoff: 5 * time.Second}
}

// Validate reports the first setting that cannot work.
func (c RetryConfig) Validate() error {
	switch {
	case c.MaxAttempts < 1:
		return fmt.Errorf("retry: max_attempts %d is below 1", c.MaxAttempts)
	case c.MinBackoff <= 0:
		return fmt.Errorf("retry: min_backoff %s is not positive", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("retry: max_backoff %s is below min_backoff %s", c.MaxBackoff, c.MinBackoff)
	}
	return nil
}

// RetryingBucket retries the operations of an inner bucket that fail with
// ErrTransient, with exponential backoff and full jitter, until
// MaxAttempts calls were made or the context is done. Other errors
// (ErrNotFound, ErrPreconditionFailed, ...) are returned at once.
//
// What is retried is the call: a Get whose body fails while being read is not
// reopened. A Put is retried only if its body can be replayed, i.e. r is an
// io.Seeker (as bytes.Reader and os.File are; PutBytes passes one): it is
// sought back to where it stood before the first attempt. Other bodies get a
// single attempt.
//
// A conditional Put retried after a transient failure may meet
// ErrPreconditionFailed caused by its own earlier attempt, which the store
// applied though the answer was lost. The error then says so; callers that
// must know (a manifest writer) read the object back to decide.
type RetryingBucket struct {
	inner Bucket
	cfg   RetryConfig
	// jitter returns a wait in [0, max); replaced in tests.
	jitter func(max time.Duration) time.Duration
}

// NewRetryingBucket wraps b. Zero fields of cfg take DefaultRetryConfig's
// values, and MaxBackoff is raised to MinBackoff if it is below it.
func NewRetryingBucket(b Bucket, cfg RetryConfig) *RetryingBucket {
	def := DefaultRetryConfig()
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = def.MaxAttempts
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = def.MinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = def.MaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	return &RetryingBucket{inner: b, cfg: cfg, jitter: fullJitter}
}

func fullJitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}

// backoff returns the wait before retry number retry (1 for the first).
func (b *RetryingBucket) backoff(retry int) time.Duration {
	limit := b.cfg.MinBackoff
	for i := 1; i < retry && limit < b.cfg.MaxBackoff; i++ {
		limit *= 2
	}
	return b.jitter(min(limit, b.cfg.MaxBackoff))
}

// do calls fn until it succeeds, fails with a non-transient error, has been
// called MaxAttempts times or ctx is done. fn gets the attempt number, from 0.
func (b *RetryingBucket) do(ctx context.Context, op Op, name string, fn func(attempt int) error) error {
	for attempt := 0; ; attempt++ {
		err := fn(attempt)
		if err == nil || !IsTransient(err) {
			return err
		}
		if attempt+1 >= b.cfg.MaxAttempts {
			if attempt == 0 {
				return err
			}
			return fmt.Errorf("%s %s: gave up after %d attempts: %w", op, name, attempt+1, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w; last error: %w", op, name, ctx.Err(), err)
		}
		t := time.NewTimer(b.backoff(attempt + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s %s: %w while waiting to retry; last error: %w", op, name, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (b *RetryingBucket) Get(ctx context.Context, name string) (rc io.ReadCloser, err error) {
	err = b.do(ctx, OpGet, name, func(int) error {
		rc, err = b.inner.Get(ctx, name)
		return err
	})
	return rc, err
}

func (b *RetryingBucket) GetRange(ctx context.Context, name string, off, length int64) (rc io.ReadCloser, err error) {
	err = b.do(ctx, OpGetRange, name, func(int) error {
		rc, err = b.inner.GetRange(ctx, name, off, length)
		return err
	})
	return rc, err
}

func (b *RetryingBucket) Attributes(ctx context.Context, name string) (a Attributes, err error) {
	err = b.do(ctx, OpAttributes, name, func(int) error {
		a, err = b.inner.Attributes(ctx, name)
		return err
	})
	return a, err
}

func (b *RetryingBucket) Put(ctx context.Context, name string, r io.Reader, size int64, opts PutOptions) (a Attributes, err error) {
	seeker, ok := r.(io.Seeker)
	var start int64
	if ok {
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			ok = false
		}
	}
	if !ok {
		return b.inner.Put(ctx, name, r, size, opts)
	}
	transientBefore := false
	err = b.do(ctx, OpPut, name, func(attempt int) error {
		if attempt > 0 {
			if _, serr := seeker.Seek(start, io.SeekStart); serr != nil {
				return fmt.Errorf("put %s: rewind body for retry: %w", name, serr)
			}
		}
		a, err = b.inner.Put(ctx, name, r, size, opts)
		if IsTransient(err) {
			transientBefore = true
		} else if transientBefore && errors.Is(err, ErrPreconditionFailed) {
			err = fmt.Errorf("%w (an earlier attempt failed transiently and may have been applied)", err)
		}
		return err
	})
	return a, err
}

func (b *RetryingBucket) Delete(ctx context.Context, name string) error {
	return b.do(ctx, OpDelete, name, func(int) error { return b.inner.Delete(ctx, name) })
}

func (b *RetryingBucket) List(ctx context.Context, prefix, startAfter string, limit int) (p ListPage, err error) {
	err = b.do(ctx, OpList, prefix, func(int) error {
		p, err = b.inner.List(ctx, prefix, startAfter, limit)
		return err
	})
	return p, err
}

// Close closes the inner bucket.
func (b *RetryingBucket) Close() error { return b.inner.Close() }
