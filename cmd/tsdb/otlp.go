package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/shaledb/shale/remotewrite"
)

// mountOTLP serves the OTLP receiver on h, appending through the remote-write
// handler rw, or a 404 that names the flag when it is off.
// target_info is sampled every half of the query lookback delta.
func mountOTLP(h *httpServer, rw *remotewrite.Handler, enabled bool, opts remotewrite.OTLPOptions, lookback time.Duration) error {
	if !enabled {
		h.otlp.set(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the OTLP receiver is off: start Shale without --no-web.enable-otlp-receiver", http.StatusNotFound)
		}))
		return nil
	}
	opts.LookbackDelta = lookback
	o, err := rw.OTLP(opts)
	if err != nil {
		return fmt.Errorf("otlp receiver: %w", err)
	}
	h.otlp.set(o)
	return nil
}
