// Package remotewrite receives Prometheus remote-write 1.0 and 2.0 requests
// (POST /api/v1/write) and OTLP/HTTP metrics (POST /api/v1/otlp/v1/metrics,
// see [OTLPHandler]), and hands the decoded samples, native histograms,
// exemplars and metadata to an [Appendable].
//
// The package declares the storage interface it needs and imports no other
// Shale package; the storage engine satisfies [Appendable] and the server wires
// the two together. Requests are decoded by a hand-written protobuf decoder
// into buffers that are reused across requests, so the decode path does not
// allocate per series or per sample. Everything handed to an [Appender] aliases
// those buffers and is valid only for the duration of the call.
//
// OTLP requests are decoded (protobuf or JSON) and translated to Prometheus
// series by the package's own code, which does what Prometheus 3's
// translator does without its dependencies; the samples then take the
// remote-write path.
//
// See docs/remotewrite.md and docs/otlp.md for the status codes, limits and
// metrics.
package remotewrite
