//go:build !linux

package replica_test

import "os/exec"

// dieWithTest: only Linux has a parent-death signal; elsewhere a test
// binary that dies without its cleanups leaves its nats-servers running.
func dieWithTest(*exec.Cmd) {}
