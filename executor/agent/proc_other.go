//go:build !unix

package agent

import "os/exec"

// Without Unix process groups only the direct child could be stopped, which would leave a
// killed command's children running; New refuses to start instead. (Windows would need a Job
// Object per command, created before the command can spawn anything.)
const processTrees = false

func setProcessGroup(*exec.Cmd) {}

func terminateGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func killGroup(int) {}

func groupAlive(int) bool { return false }
