//go:build !unix

package conformance

import (
	"os"
	"os/exec"
)

var sigterm = os.Interrupt

func ownGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
