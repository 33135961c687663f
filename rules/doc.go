// Package rules evaluates Prometheus recording and alerting rules over
// Shale's own storage and sends alerts to Alertmanager.
//
// It is the upstream rule manager (github.com/prometheus/prometheus/rules)
// and notifier (github.com/prometheus/prometheus/notifier) wired as a
// Prometheus server wires them: rule files in Prometheus' format listed under
// rule_files (globs) in the config file, the global section's
// evaluation_interval, rule_query_offset and external_labels, and the
// alerting section's Alertmanagers (static targets only) and
// alert_relabel_configs. Recording rules and the ALERTS and ALERTS_FOR_STATE
// series are written through the storage's appender, the same path as remote
// write; an alert's 'for' state is restored from ALERTS_FOR_STATE after a
// restart, as Prometheus does.
//
// Handler serves /api/v1/rules, /api/v1/alerts and /api/v1/alertmanagers with
// the upstream HTTP API's code, so the answers are Prometheus' byte for byte.
package rules
