//go:build !unix

package agent

import "os/exec"

// Without Unix process groups only the direct child can be stopped.

func setProcessGroup(*exec.Cmd) {}

func terminateGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func killGroup(int) {}

func groupAlive(int) bool { return false }
