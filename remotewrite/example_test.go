package remotewrite_test

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/storage"
	"github.com/shaledb/shale/remotewrite"
)

// The server wires a storage that implements the upstream AppendableV2 to the
// receiver.
func ExampleNewHandler() {
	var db storage.AppendableV2 // the storage engine
	opts := remotewrite.DefaultOptions()
	opts.MaxSampleAge = 0 // let the storage decide what is too old
	h, err := remotewrite.NewHandler(remotewrite.FromAppendableV2(db), opts, remotewrite.Components{
		Logger:     slog.Default(),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/write", h)
}
