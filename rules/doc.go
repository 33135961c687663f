// Package rules evaluates Prometheus recording and alerting rules over
// Shale's own storage and sends alerts to Alertmanager.
//
// It does what a Prometheus server's rule manager and notifier do, with
// code of its own written to Prometheus' documented behaviour (and tested
// against Prometheus' packages): rule files in Prometheus' format listed
// under rule_files (globs) in the config file, the global section's
// evaluation_interval, rule_query_offset and external_labels, and the
// alerting section's Alertmanagers (static targets only) and
// alert_relabel_configs. Groups evaluate at a phase of their interval set by
// a hash of their name and file; recording rules and the ALERTS and
// ALERTS_FOR_STATE series are written through the storage's appender, the
// same path as remote write, with stale markers for series that go away; an
// alert's 'for' state is restored from ALERTS_FOR_STATE after a restart.
// Alerts go to Alertmanager's API v2, each Alertmanager with its own queue.
//
// Of Prometheus it uses only the light packages: rulefmt (rule files and
// promtool's checks), relabel, template, promql and common/config's HTTP
// client settings; not rules, notifier, config or discovery, which bring
// service discovery, cloud SDKs and the Alertmanager API client.
//
// Handler serves /api/v1/rules, /api/v1/alerts and /api/v1/alertmanagers,
// answering byte for byte as Prometheus' web/api/v1 does.
package rules
