//go:build !linux

package testenv

import "os/exec"

// setPdeathsig is a no-op outside Linux: call Main from TestMain there.
func setPdeathsig(cmd *exec.Cmd) {}
