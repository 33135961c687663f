package depcheck

// The OTLP translator belongs to the receivers: only remotewrite imports it.
func init() {
	upstreamOnly["github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"] = "remotewrite"
}
