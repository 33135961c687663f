// Package importer moves history into Shale: it reads a Prometheus data
// directory (blocks through the upstream format packages, the head from its
// WAL), an OpenMetrics text file (as promtool tsdb create-blocks-from
// openmetrics reads it) or VictoriaMetrics' JSON-line export, and writes what
// it reads to a Sink: a storage appender (the import owns the bucket) or a
// running server's remote-write endpoint. It also serves POST /api/v1/import,
// the JSON-line format VictoriaMetrics accepts there, over an Appendable it
// declares.
//
// Samples are idempotent in Shale (same series and timestamp keep one
// value), so an interrupted import is finished by running it again.
package importer
