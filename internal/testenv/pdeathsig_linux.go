//go:build linux

package testenv

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL the child when this process dies,
// so a private redis-server never outlives a test binary that did not call
// Main (or that crashed or timed out).
func setPdeathsig(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
}
