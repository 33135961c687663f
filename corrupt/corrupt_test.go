package corrupt_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shaledb/shale/corrupt"
)

func TestNew(t *testing.T) {
	errA := corrupt.New("a: corrupt")
	errB := corrupt.New("b: corrupt")
	err := fmt.Errorf("read x: %w", fmt.Errorf("%w: bad checksum", errA))
	if !errors.Is(err, corrupt.Err) || !errors.Is(err, errA) {
		t.Fatalf("%v: want it to be corrupt.Err and errA", err)
	}
	if errors.Is(err, errB) {
		t.Fatalf("%v is errB, another package's sentinel", err)
	}
	if got, want := err.Error(), "read x: a: corrupt: bad checksum"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if errors.Is(errors.New("corrupt data"), corrupt.Err) {
		t.Fatal("an error with the same text is corrupt.Err")
	}
}
