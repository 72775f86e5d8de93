//go:build !e2e

package main

import (
	"os"
	"testing"

	"github.com/pacerhq/pacer/internal/testenv"
)

// The default suite runs in process and builds no binary; the
// process-level tests (build tag e2e, `make test-e2e`) have their own
// TestMain in e2e_test.go, which builds it.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
