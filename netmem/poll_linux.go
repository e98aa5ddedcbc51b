//go:build linux

package netmem

import (
	"log/slog"
	"reflect"
	"sync"
	"syscall"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
)

// pollerWarning logs once that pausing is unavailable.
var pollerWarning sync.Once

// epollReading sets gc's interest in its loop's epoll set (see setReading).
func (h *Holder) epollReading(log *slog.Logger, gc gnet.Conn, on, writing, hangup bool) {
	if h.epfd == 0 {
		if h.epfd = pollerOf(gc); h.epfd < 0 {
			pollerWarning.Do(func() {
				log.Warn("cannot pause reading connections: gnet's internals are not the ones known (netmem/poll_linux.go); only the output stop and the close limits bound network memory")
			})
		}
	}
	if h.epfd < 0 {
		return
	}
	var ev uint32
	if on {
		ev = syscall.EPOLLIN | syscall.EPOLLPRI
	}
	if writing {
		ev |= syscall.EPOLLOUT
	}
	if hangup && !on {
		ev |= syscall.EPOLLRDHUP
	}
	fd := gc.Fd()
	_ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_MOD, fd, &syscall.EpollEvent{Fd: int32(fd), Events: ev})
}

// pollerOf returns the epoll descriptor of gc's event loop (gnet v2.10's
// conn.loop.poller.fd), or -1 when gnet's layout is not the one known.
func pollerOf(gc gnet.Conn) (fd int) {
	defer func() {
		if recover() != nil {
			fd = -1
		}
	}()
	v := reflect.ValueOf(gc)
	for _, name := range []string{"loop", "poller", "fd"} {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return -1
		}
		v = v.FieldByName(name)
		if !v.IsValid() {
			return -1
		}
	}
	if v.Kind() != reflect.Int || v.Int() <= 0 {
		return -1
	}
	return int(v.Int())
}

// unread returns how many bytes socket fd has received that nobody has
// read yet (SIOCINQ), 0 when it cannot tell.
func unread(fd int) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0
	}
	return int(n)
}
