//go:build linux

package engine

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walQuickWait bounds how long a WAL sync may hold its processor while it
// waits (see walFile). A variable for the tests.
var walQuickWait = 2 * time.Millisecond

// Linux AIO (linux/aio_abi.h).
const iocbCmdFdsync = 3

type iocb struct {
	data     uint64
	key      uint32
	rwFlags  int32
	opcode   uint16
	reqprio  int16
	fildes   uint32
	buf      uint64
	nbytes   uint64
	offset   int64
	reserved uint64
	flags    uint32
	resfd    uint32
}

type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

// walFile is a WAL file whose fdatasync is issued through Linux AIO
// (IOCB_CMD_FDSYNC) and waited for in two steps: first for up to
// walQuickWait in a raw syscall, which keeps the goroutine's processor,
// then, if the disk is slower than that, in an ordinary blocking syscall,
// which lets the runtime hand the processor to other goroutines.
//
// Why: with wal_sync on, Pebble's WAL flusher fsyncs every few hundred
// microseconds. A plain blocking fdatasync lasts longer than one tick of
// Go's sysmon (20 µs), so sysmon takes the flusher's processor from it and
// hands it to another thread at nearly every sync; each take also resets
// sysmon to its fastest polling, so it never backs off. Under memcaslap at
// -c 32 sysmon then woke 45,000 times in 6 s and used 11–14% of kvd's CPU.
// A raw wait is invisible to sysmon. It cannot stall the runtime: a
// stop-the-world (GC) signals the thread, which ends the wait (aioWait),
// and a disk slower than walQuickWait is waited for like any blocking
// syscall.
//
// Syncs of one file are serialized (Pebble's flusher already does).
// Where AIO cannot be set up, SyncData is the plain fdatasync.
type walFile struct {
	vfs.File
	mu    sync.Mutex
	plain bool // AIO unavailable for this file: plain SyncData
	used  bool // a sync went through AIO (for the tests)
	cb    iocb
	ev    ioEvent
}

func newWALFile(f vfs.File) vfs.File {
	if f.Fd() == vfs.InvalidFd {
		return f
	}
	return &walFile{File: f}
}

func (f *walFile) SyncData() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plain {
		return f.File.SyncData()
	}
	ctx, ok := aioContexts.get()
	if !ok {
		f.plain = true
		return f.File.SyncData()
	}
	f.cb = iocb{opcode: iocbCmdFdsync, fildes: uint32(f.Fd())}
	cbs := [1]*iocb{&f.cb}
	_, _, e := syscall.RawSyscall(syscall.SYS_IO_SUBMIT, ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
	for e == syscall.EINTR {
		_, _, e = syscall.RawSyscall(syscall.SYS_IO_SUBMIT, ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
	}
	if e != 0 {
		// EINVAL: this file cannot be synced through AIO; EAGAIN: no
		// room for the request now.
		aioContexts.put(ctx)
		f.plain = e != syscall.EAGAIN
		return f.File.SyncData()
	}
	if err := aioWait(ctx, &f.ev); err != nil {
		// The sync may still be in flight: its event must not be taken
		// for a later one's, so the context is not reused.
		aioContexts.discard(ctx)
		f.plain = true
		return err
	}
	aioContexts.put(ctx)
	f.used = true
	if f.ev.res < 0 {
		return syscall.Errno(-f.ev.res)
	}
	return nil
}

// aioWait waits for the one operation in flight on the AIO context ctx and
// stores its event in ev: for up to walQuickWait in a raw syscall, then in
// a blocking one. A signal ends the raw wait (io_getevents is never
// restarted after a signal handler), and the runtime signals a thread when
// it stops the world, so a garbage collection does not wait for the disk.
func aioWait(ctx uintptr, ev *ioEvent) error {
	ts := syscall.NsecToTimespec(int64(walQuickWait))
	n, _, e := syscall.RawSyscall6(syscall.SYS_IO_GETEVENTS, ctx, 1, 1, uintptr(unsafe.Pointer(ev)), uintptr(unsafe.Pointer(&ts)), 0)
	for n != 1 {
		if e != 0 && e != syscall.EINTR {
			return e
		}
		n, _, e = syscall.Syscall6(syscall.SYS_IO_GETEVENTS, ctx, 1, 1, uintptr(unsafe.Pointer(ev)), 0, 0)
	}
	return nil
}

func (f *walFile) Close() error {
	f.mu.Lock()
	f.plain = true
	f.mu.Unlock()
	return f.File.Close()
}

// aioContexts are the AIO contexts of WAL syncs, one per sync in progress,
// set up once and kept for the life of the process. A context is not
// destroyed when its file closes: io_destroy waits for an RCU grace period
// (26–35 ms under load here, perf trace), and Pebble closes a WAL inside
// its WAL rotation, with every commit waiting behind it; a context per file
// stalled every write at every memtable rotation for that long.
var aioContexts aioContextList

type aioContextList struct {
	mu   sync.Mutex
	free []uintptr // idle contexts, each with nothing in flight
}

// get returns an idle context, setting one up when none is; false when AIO
// is unavailable.
func (l *aioContextList) get() (uintptr, bool) {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		ctx := l.free[n-1]
		l.free = l.free[:n-1]
		l.mu.Unlock()
		return ctx, true
	}
	l.mu.Unlock()
	var ctx uintptr
	if _, _, e := syscall.Syscall(syscall.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return 0, false
	}
	return ctx, true
}

// put gives back a context whose operation has completed.
func (l *aioContextList) put(ctx uintptr) {
	l.mu.Lock()
	l.free = append(l.free, ctx)
	l.mu.Unlock()
}

// discard destroys a context that may still have an operation in flight,
// off the caller's goroutine (io_destroy waits for it).
func (l *aioContextList) discard(ctx uintptr) {
	go func() { _, _, _ = syscall.Syscall(syscall.SYS_IO_DESTROY, ctx, 0, 0) }()
}
