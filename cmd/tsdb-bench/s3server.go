package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

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
