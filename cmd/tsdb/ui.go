package main

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"

	shaleweb "github.com/shaledb/shale/web"
)

// addUIFlags adds the flags of the UI and of the route prefix, as
// Prometheus has them.
func addUIFlags(app *kingpin.Application, cfg *config) {
	app.Flag("web.external-url", "The URL under which Shale is reached from outside (e.g. behind a reverse proxy at a sub-path: https://example.com/shale/). Its path is the default of --web.route-prefix. Default: http://<hostname>:<port>/.").
		PlaceHolder("<URL>").StringVar(&cfg.externalURL)
	app.Flag("web.route-prefix", "Prefix of every HTTP route (UI, API, remote write, /metrics, health). Default: the path of --web.external-url. \"/\" when a proxy strips the sub-path before passing requests on.").
		PlaceHolder("<path>").StringVar(&cfg.routePrefix)
}

// externalURL is --web.external-url parsed, with a path without trailing
// slash (empty at the root); by default http://<hostname>:<port>.
func externalURL(s, listenAddress string) (*url.URL, error) {
	if s == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--web.external-url not given and no host name: %w", err)
		}
		_, port, err := net.SplitHostPort(listenAddress)
		if err != nil {
			return nil, fmt.Errorf("--web.listen-address %q: %w", listenAddress, err)
		}
		s = "http://" + net.JoinHostPort(host, port) + "/"
	}
	if strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "'") || strings.HasSuffix(s, `"`) || strings.HasSuffix(s, "'") {
		return nil, fmt.Errorf("--web.external-url %s: quotes are not part of a URL", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--web.external-url: %w", err)
	}
	if u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("--web.external-url %q: not an absolute URL (e.g. http://example.com/shale/)", s)
	}
	p := strings.TrimRight(u.Path, "/")
	if p != "" && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	u.Path = p
	return u, nil
}

// routePrefix is --web.route-prefix, or the external URL's path: "/" or a
// path starting with "/" and without trailing slash.
func routePrefix(flag string, ext *url.URL) string {
	if flag == "" {
		flag = ext.Path
	}
	return "/" + strings.Trim(flag, "/")
}

// uiHandler serves the UI under the route prefix's mux.
func uiHandler(ext *url.URL) http.Handler {
	return shaleweb.Handler(shaleweb.Options{ExternalPath: ext.Path})
}

// withRoutePrefix serves h under prefix: requests below it reach h with the
// prefix stripped, / and the prefix alone redirect to prefix/, anything
// else is 404.
func withRoutePrefix(prefix string, h http.Handler) http.Handler {
	if prefix == "/" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == prefix {
			http.Redirect(w, r, prefix+"/", http.StatusFound)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || !strings.HasPrefix(rest, "/") {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = rest
		if r.URL.RawPath != "" {
			if raw, ok := strings.CutPrefix(r.URL.RawPath, prefix); ok {
				r2.URL.RawPath = raw
			} else {
				r2.URL.RawPath = ""
			}
		}
		h.ServeHTTP(w, r2)
	})
}
