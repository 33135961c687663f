package extralabel

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

func TestParse(t *testing.T) {
	got, err := Parse([]string{"zone=b", "env=prod", "zone=c", "dots.ok=1", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	want := []labels.Label{{Name: "dots.ok", Value: "1"}, {Name: "empty", Value: ""}, {Name: "env", Value: "prod"}, {Name: "zone", Value: "c"}}
	if len(got) != len(want) {
		t.Fatalf("Parse = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Parse = %v, want %v (sorted by name, the last value of a name)", got, want)
		}
	}
	for _, bad := range []string{"noequals", "=v", "a=\xff", "\xff=1"} {
		if _, err := Parse([]string{"ok=1", bad}); err == nil || !strings.Contains(err.Error(), Arg) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", bad, err, Arg)
		}
	}
	if got, err := Parse(nil); err != nil || got != nil {
		t.Errorf("Parse(nil) = %v, %v", got, err)
	}
}

func TestApply(t *testing.T) {
	lbls := []labels.Label{{Name: "__name__", Value: "m"}, {Name: "env", Value: "dev"}, {Name: "job", Value: "x"}}
	set := []labels.Label{{Name: "env", Value: "prod"}, {Name: "region", Value: "eu"}}
	got := Apply(nil, lbls, set)
	want := labels.FromStrings("__name__", "m", "env", "prod", "job", "x", "region", "eu")
	if gl := labels.New(got...); !labels.Equal(gl, want) {
		t.Fatalf("Apply = %v, want %v", gl, want)
	}
	if lbls[1].Value != "dev" {
		t.Errorf("Apply changed its input: %v", lbls)
	}
}
