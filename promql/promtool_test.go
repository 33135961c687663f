package promql

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
)

// TestPromtool runs promtool's query commands against the API.
func TestPromtool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the external promtool")
	}
	t.Parallel()
	bin := findBinary(t, "promtool")
	ts := newShaleServer(t, nil)

	base := time.Unix(1_700_000_000, 0).UTC()
	app := ts.db.Appender(context.Background())
	for i := range 5 {
		tm := base.Add(time.Duration(i) * time.Minute).UnixMilli()
		_, err := app.Append(0, labels.FromStrings("__name__", "up", "job", "api", "instance", "a:9090"), tm, 1)
		require.NoError(t, err)
		_, err = app.Append(0, labels.FromStrings("__name__", "up", "job", "web", "instance", "b:9090"), tm, 0)
		require.NoError(t, err)
		_, err = app.Append(0, labels.FromStrings("__name__", "jobs_done_total", "job", "api"), tm, float64(10*i))
		require.NoError(t, err)
	}
	require.NoError(t, app.Commit())

	at := "1700000240" // base + 4m
	cases := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "instant",
			args: []string{"instant", "--time=" + at, ts.srv.URL, "up"},
			want: "up{instance=\"a:9090\", job=\"api\"} => 1 @[1700000240]\n" +
				"up{instance=\"b:9090\", job=\"web\"} => 0 @[1700000240]\n",
		},
		{
			name: "instant scalar",
			args: []string{"instant", "--time=" + at, ts.srv.URL, "sum(jobs_done_total) * 2"},
			want: "{} => 80 @[1700000240]\n",
		},
		{
			name: "range",
			args: []string{"range", "--start=1700000120", "--end=" + at, "--step=1m", ts.srv.URL, "jobs_done_total"},
			want: "jobs_done_total{job=\"api\"} =>\n20 @[1700000120]\n30 @[1700000180]\n40 @[1700000240]\n",
		},
		{
			name: "series",
			args: []string{"series", "--match=up", "--start=1700000000", "--end=" + at, ts.srv.URL},
			want: "{__name__=\"up\", instance=\"a:9090\", job=\"api\"}\n{__name__=\"up\", instance=\"b:9090\", job=\"web\"}\n",
		},
		{
			name: "labels",
			args: []string{"labels", "--start=1700000000", "--end=" + at, ts.srv.URL, "job"},
			want: "api\nweb\n",
		},
		{
			name: "labels match",
			args: []string{"labels", "--match=up{job=\"web\"}", "--start=1700000000", "--end=" + at, ts.srv.URL, "instance"},
			want: "b:9090\n",
		},
		{
			name: "label names json",
			args: []string{"labels", "-o", "json", "--start=1700000000", "--end=" + at, ts.srv.URL, "__name__"},
			want: "[\"jobs_done_total\",\"up\"]\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, append([]string{"query"}, c.args...)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			require.NoError(t, err, "promtool %s: %s", strings.Join(c.args, " "), stderr.String())
			require.Equal(t, c.want, stdout.String())
		})
	}
}
