// Package promql serves PromQL and the Prometheus HTTP API (/api/v1/*) over
// Shale's storage.
//
// The query engine and parser are the upstream ones
// (github.com/prometheus/prometheus/promql); this package is the only one in
// Shale that imports them. The HTTP handlers are its own, written to answer
// byte for byte as Prometheus' web/api/v1 does (TestSameAsUpstream compares
// the two), without linking that package and what it brings (rules, scrape,
// service discovery). It reaches the storage only through interfaces: the upstream
// storage.Queryable and storage.ExemplarQueryable, plus the small interfaces
// declared in components.go for cardinality statistics, metric metadata,
// series deletion and readiness.
//
// Settings (Options) are kept apart from components (Components): the server
// builds both and calls NewAPI, then mounts the API with Register or Handler.
package promql
