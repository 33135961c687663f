// Package promreg registers Prometheus collectors the one way Shale does it:
// a collector already registered by another instance (two LSMs, buckets or
// handlers on one registry) is reused, so they share its series; any other
// registration error is returned.
//
// It imports no Shale package, so that every package may import it.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c with reg. If reg already holds an equal collector
// (same descriptors) that is a C, *c is replaced by it, so the caller's
// updates reach the series already exposed. A nil reg registers nothing.
//
// Any other error, such as a metric of the same name with other labels or
// help, or an equal collector of another type, is returned and *c is left
// as it was. It is neither swallowed, which would leave metrics missing with
// no word why, nor a panic: the registry and whatever it held before belong
// to the caller (a program that embeds Shale registers its own metrics), so a
// conflict is the caller's to handle, and a constructor that registers
// metrics returns it like any other error of its setup.
//
// Reuse is right only for collectors that hold nothing but their series
// (counters, gauges, histograms and their vectors). A collector that reads
// one instance's state (a GaugeFunc, a custom Collector) must be registered
// with reg.Register, so that a second instance fails rather than exposing
// the first's state.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return fmt.Errorf("%w: the one registered is a %T, not a %T", err, are.ExistingCollector, *c)
	}
	*c = existing
	return nil
}
