//go:build unix

package conformance

import (
	"os/exec"
	"syscall"
)

var sigterm = syscall.SIGTERM

// ownGroup starts cmd in a process group of its own, so that whatever it starts can be
// ended with it.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup SIGKILLs cmd's process group.
func killGroup(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
