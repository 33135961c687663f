package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shaledb/shale/storage/objstore"
)

// s3Server is a versitygw process serving S3 on 127.0.0.1 from a folder
// (posix backend), as storage/objstore/objstoretest starts it for tests.
type s3Server struct {
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string

	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	admin   *objstore.S3Bucket
}

// startS3Server starts versitygw (binary bin) with its data and log under
// dir and waits until it answers. Stop it with stop.
func startS3Server(ctx context.Context, bin, dir string) (*s3Server, error) {
	var lastErr error
	// The free port may be taken between probing and binding; try a few.
	for range 3 {
		srv, err := tryStartS3Server(ctx, bin, dir)
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

func tryStartS3Server(ctx context.Context, bin, dir string) (*s3Server, error) {
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	srv := &s3Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		Region:    "us-east-1",
		AccessKey: "shalesoakaccess",
		SecretKey: "shalesoaksecret0123456789",
		logPath:   logPath,
		exited:    make(chan struct{}),
	}
	srv.cmd = exec.Command(bin,
		"--access", srv.AccessKey, "--secret", srv.SecretKey,
		"--region", srv.Region,
		"--port", "127.0.0.1:"+strconv.Itoa(port),
		"posix", data)
	srv.cmd.Stdout, srv.cmd.Stderr = logFile, logFile
	srv.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = srv.cmd.Wait(); close(srv.exited) }()
	srv.admin, err = objstore.NewS3Bucket(ctx, srv.config("unused", srv.Endpoint))
	if err == nil {
		err = srv.waitReady(ctx, 30*time.Second)
	}
	if err != nil {
		srv.stop()
		return nil, err
	}
	return srv, nil
}

// waitReady polls ListBuckets until it answers, the process exits or the
// timeout passes.
func (s *s3Server) waitReady(ctx context.Context, timeout time.Duration) error {
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
			return fmt.Errorf("versitygw at %s not ready after %s: %w; log:\n%s", s.Endpoint, timeout, err, s.logTail())
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before it was ready (%v); log:\n%s", s.cmd.ProcessState, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *s3Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// stop ends versitygw (SIGTERM, SIGKILL after 10 s). Safe to call twice.
func (s *s3Server) stop() {
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// config returns the S3 settings of bucket reached at endpoint (the server
// itself, or a proxy in front of it).
func (s *s3Server) config(bucket, endpoint string) objstore.S3Config {
	cfg := objstore.DefaultS3Config()
	cfg.Bucket = bucket
	cfg.Endpoint, cfg.Region, cfg.ForcePathStyle = endpoint, s.Region, true
	cfg.AccessKeyID, cfg.SecretAccessKey = s.AccessKey, s.SecretKey
	return cfg
}

// createBucket creates bucket name.
func (s *s3Server) createBucket(ctx context.Context, name string) error {
	if _, err := s.admin.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}

// findVersityGW resolves the versitygw binary: bin as given (a path or a
// name on PATH).
func findVersityGW(bin string) (string, error) {
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("versitygw %s not found (make tools): %w", bin, err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	return p, nil
}

// objstoreYAML is Shale's --objstore.config-file for cfg.
func objstoreYAML(cfg objstore.S3Config) string {
	return fmt.Sprintf("type: s3\nconfig:\n  bucket: %s\n  region: %s\n  endpoint: %s\n  force_path_style: true\n"+
		"  access_key_id: %s\n  secret_access_key: %s\n", cfg.Bucket, cfg.Region, cfg.Endpoint, cfg.AccessKeyID, cfg.SecretAccessKey)
}
