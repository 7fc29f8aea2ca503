//go:build linux

package replica_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes cmd's process get SIGKILL when the test process
// dies: a test binary that panics (go test's timeout) runs no cleanup,
// and a nats-server it started would run on.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
