package etcdtest

import "syscall"

// procAttr makes etcd die with the test binary.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
