package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/otlptranslator"
)

func TestOTLPConfigSection(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadFileConfig(writeFile(t, dir, "ok.yml", `otlp:
  translation_strategy: NoUTF8EscapingWithSuffixes
  promote_resource_attributes: [service.version, k8s.namespace.name]
  keep_identifying_resource_attributes: true
  convert_histograms_to_nhcb: true
  promote_scope_metadata: true
  native_delta_ingestion: true
`))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.OTLP
	if o.TranslationStrategy != otlptranslator.NoUTF8EscapingWithSuffixes || len(o.PromoteResourceAttributes) != 2 ||
		!o.KeepIdentifyingResourceAttributes || !o.ConvertHistogramsToNHCB || !o.PromoteScopeMetadata || !o.NativeDeltaIngestion ||
		!o.LabelNameUnderscoreSanitization || !o.LabelNamePreserveMultipleUnderscores {
		t.Fatalf("otlp section read as %+v", o)
	}
	if cfg, err := loadFileConfig(""); err != nil || cfg.OTLP.TranslationStrategy != otlptranslator.UnderscoreEscapingWithSuffixes {
		t.Fatalf("default otlp settings %+v, %v", cfg.OTLP, err)
	}
	for name, bad := range map[string]string{
		"strategy":  "otlp:\n  translation_strategy: Escaped\n",
		"both":      "otlp:\n  promote_all_resource_attributes: true\n  promote_resource_attributes: [a]\n",
		"ignore":    "otlp:\n  ignore_resource_attributes: [a]\n",
		"unknown":   "otlp:\n  promote_everything: true\n",
		"duplicate": "otlp:\n  promote_resource_attributes: [a, a]\n",
	} {
		if _, err := loadFileConfig(writeFile(t, dir, name+".yml", bad)); err == nil || !strings.Contains(err.Error(), "otlp") && name != "unknown" {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

// TestOTLPOffAndReader checks the receiver's answers when it is off and on
// a read-only replica.
func TestOTLPOffAndReader(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	w := startShale(t, "--storage.path="+data, "--no-web.enable-otlp-receiver")
	code, body := postRaw(t, w.url)
	if code != http.StatusNotFound || !strings.Contains(body, "--no-web.enable-otlp-receiver") {
		t.Errorf("receiver off: %d %q", code, body)
	}
	r := startShale(t, "--storage.path="+data, "--mode=reader")
	code, body = postRaw(t, r.url)
	if code != http.StatusMethodNotAllowed || !strings.Contains(body, "read-only replica") {
		t.Errorf("reader: %d %q", code, body)
	}
	r.stop(t)
	w.stop(t)
}

func postRaw(t *testing.T, base string) (int, string) {
	t.Helper()
	return sendPost(t, base+"/api/v1/otlp/v1/metrics", "application/json", strings.NewReader("{}"))
}
