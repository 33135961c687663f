// Package versitygw starts versitygw, an S3-compatible server, on 127.0.0.1
// with a folder as its store (posix backend): for the tests that need a real
// S3 server and for the fault soak.
package versitygw

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shaledb/shale/internal/proc"
	"github.com/shaledb/shale/storage/objstore"
)

// Server is a running versitygw process.
type Server struct {
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string

	cmd     *exec.Cmd
	dir     string
	tempDir bool // dir is Start's own, removed by Stop
	logPath string
	exited  chan struct{}
	admin   *objstore.S3Bucket
}

// Start runs versitygw (binary bin) with its data and log under dir (a new
// temporary folder when dir is empty, removed by Stop) and waits until it
// answers. The process is killed if this one dies first (Linux).
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	var lastErr error
	// The free port may be taken between probing and binding; try a few.
	for range 3 {
		srv, err := tryStart(ctx, bin, dir)
		if err == nil {
			return srv, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func tryStart(ctx context.Context, bin, dir string) (*Server, error) {
	tempDir := dir == ""
	if tempDir {
		var err error
		if dir, err = os.MkdirTemp("", "shale-versitygw-"); err != nil {
			return nil, err
		}
	}
	cleanup := func() {
		if tempDir {
			os.RemoveAll(dir)
		}
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		cleanup()
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		cleanup()
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	srv := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		Region:    "us-east-1",
		AccessKey: "shaletestaccess",
		SecretKey: "shaletestsecret0123456789",
		dir:       dir,
		tempDir:   tempDir,
		logPath:   logPath,
		exited:    make(chan struct{}),
	}
	srv.cmd = exec.Command(bin,
		"--access", srv.AccessKey, "--secret", srv.SecretKey,
		"--region", srv.Region,
		"--port", "127.0.0.1:"+strconv.Itoa(port),
		"posix", data)
	srv.cmd.Stdout, srv.cmd.Stderr = logFile, logFile
	srv.cmd.SysProcAttr = childProcAttr()
	if err := srv.cmd.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = srv.cmd.Wait(); close(srv.exited) }()
	srv.admin, err = objstore.NewS3Bucket(ctx, srv.S3Config("unused", ""))
	if err == nil {
		err = srv.waitReady(ctx, 30*time.Second)
	}
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls ListBuckets until it answers, the process exits or the
// timeout passes.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.admin.Client().ListBuckets(cctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw at %s not ready after %s: %w; log:\n%s", s.Endpoint, timeout, err, s.LogTail())
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before it was ready (%v); log:\n%s", s.cmd.ProcessState, s.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// LogTail returns the last 4000 bytes of the server's log.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop ends the server (SIGTERM, SIGKILL after 10 s) and removes its folder
// if Start made it. Safe to call twice.
func (s *Server) Stop() {
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	proc.Stop(s.cmd.Process, s.exited, 10*time.Second)
	if s.tempDir {
		os.RemoveAll(s.dir)
	}
}

// S3Config returns the S3 settings of bucket reached at endpoint (a proxy in
// front of the server), or at the server itself when endpoint is empty.
func (s *Server) S3Config(bucket, endpoint string) objstore.S3Config {
	if endpoint == "" {
		endpoint = s.Endpoint
	}
	cfg := objstore.DefaultS3Config()
	cfg.Bucket = bucket
	cfg.Endpoint, cfg.Region, cfg.ForcePathStyle = endpoint, s.Region, true
	cfg.AccessKeyID, cfg.SecretAccessKey = s.AccessKey, s.SecretKey
	return cfg
}

// MakeBucket creates bucket name.
func (s *Server) MakeBucket(ctx context.Context, name string) error {
	if _, err := s.admin.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}

// ObjstoreYAML is Shale's --objstore.config-file for cfg, with prefix.
func ObjstoreYAML(cfg objstore.S3Config, prefix string) string {
	return fmt.Sprintf("type: s3\nprefix: %s\nconfig:\n  bucket: %s\n  region: %s\n  endpoint: %s\n  force_path_style: true\n"+
		"  access_key_id: %s\n  secret_access_key: %s\n", prefix, cfg.Bucket, cfg.Region, cfg.Endpoint, cfg.AccessKeyID, cfg.SecretAccessKey)
}
