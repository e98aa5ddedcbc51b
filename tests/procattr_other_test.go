//go:build !linux

package tests

import "os/exec"

// dieWithTest is a no-op where the kernel offers no parent-death signal.
func dieWithTest(*exec.Cmd) {}
