package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shaledb/shale/internal/versitygw"
)

// s3Backend is the object store of the shale-s3 system: versitygw behind
// the fault proxy, which adds -s3-latency to every request and injects no
// faults. It lives from prepare to the end of the system's run, across
// restarts.
type s3Backend struct {
	srv       *versitygw.Server
	stopProxy func()
	cfgPath   string
	dataDir   string // the bucket's folder: what "stored bytes" measures
}

const benchBucket = "shale-bench"

// startS3Backend starts versitygw (binary bin) under dir and the proxy in
// front of it, and writes the objstore config file Shale is started with.
func startS3Backend(ctx context.Context, o *options, dir string) (*s3Backend, error) {
	bin, err := findVersityGW(o.soak.VersityGW)
	if err != nil {
		return nil, err
	}
	srv, err := versitygw.Start(ctx, bin, filepath.Join(dir, "versitygw"))
	if err != nil {
		return nil, err
	}
	b := &s3Backend{srv: srv, stopProxy: func() {}, dataDir: filepath.Join(dir, "versitygw", "data", benchBucket)}
	if err := srv.MakeBucket(ctx, benchBucket); err != nil {
		b.stop()
		return nil, err
	}
	proxy, err := newFaultProxy(srv.Endpoint, faultConfig{Latency: o.s3Latency, Mix: faultMix{1, 1, 1}, Seed: 1}, nil)
	if err != nil {
		b.stop()
		return nil, err
	}
	proxyURL, stopProxy, err := serveProxy(proxy)
	if err != nil {
		b.stop()
		return nil, err
	}
	b.stopProxy = stopProxy
	b.cfgPath = filepath.Join(dir, "objstore.yml")
	yml := versitygw.ObjstoreYAML(srv.S3Config(benchBucket, proxyURL), "")
	if err := os.WriteFile(b.cfgPath, []byte(yml), 0o600); err != nil {
		b.stop()
		return nil, fmt.Errorf("write the objstore config: %w", err)
	}
	return b, nil
}

func (b *s3Backend) stop() {
	b.stopProxy()
	b.srv.Stop()
}
