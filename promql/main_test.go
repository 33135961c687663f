package promql

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The upstream HTTP transport keeps idle connections of test clients.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
