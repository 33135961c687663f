// Package promql serves PromQL and the Prometheus HTTP API (/api/v1/*) over
// Shale's storage.
//
// The query engine is the upstream one (github.com/prometheus/prometheus/promql)
// and the HTTP handlers are the upstream web/api/v1 handlers, so answers are
// byte-compatible with Prometheus. This package is the only one in Shale that
// imports them. It reaches the storage only through interfaces: the upstream
// storage.Queryable and storage.ExemplarQueryable, plus the small interfaces
// declared in components.go for cardinality statistics, metric metadata,
// series deletion and readiness.
//
// Settings (Options) are kept apart from components (Components): the server
// builds both and calls NewAPI, then mounts the API with Register or Handler.
package promql
