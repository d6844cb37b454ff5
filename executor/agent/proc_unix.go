//go:build unix

package agent

import (
	"errors"
	"os/exec"
	"syscall"
)

// processTrees: a command's whole process group can be signalled, so New may run.
const processTrees = true

// setProcessGroup starts cmd as the leader of a new process group, so that its children,
// grandchildren and so on can be signalled together.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminateGroup asks the whole process group of cmd to stop (SIGTERM).
func terminateGroup(cmd *exec.Cmd) error {
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}

// killGroup SIGKILLs whatever is left of the process group pgid.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// groupAlive reports whether any process is still in the group pgid.
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
