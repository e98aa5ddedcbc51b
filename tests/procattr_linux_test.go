package tests

import (
	"os/exec"
	"syscall"
)

// dieWithTest asks the kernel to kill cmd's process when the test binary
// dies without running its cleanups (a go test -timeout panic, a SIGKILL),
// so that no helper server outlives the tests.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
