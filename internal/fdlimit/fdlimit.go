// Package fdlimit shares the process's open-file limit (RLIMIT_NOFILE) out
// among what holds descriptors, so that kvd never runs out of them while it
// serves. Running out is not a refusal but an outage: gnet stops its whole
// engine when accept fails (EMFILE included), closing every connection and
// the listener.
//
// The shares of a limit L (Go raises the soft limit to the hard one at
// start):
//
//   - Own: 128 for kvd's own descriptors (standard streams, the loops'
//     epoll and eventfd, the listeners and the metrics connections, the
//     config watcher, etcd's connections, the WAL, the manifest, the tables
//     a flush or compaction writes);
//   - Store: Pebble's table cache (its MaxOpenFiles), a quarter of the rest,
//     at most Pebble's default of 1,000;
//   - Backlog: the listen backlog, an eighth of the rest, at most the
//     kernel's somaxconn and memcached's default of 1,024: gnet accepts
//     what the backlog holds in one go, before kvd can refuse a connection
//     over max_connections;
//   - Conns: what is left, the most connections kvd lets max_connections
//     open.
package fdlimit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const (
	own              = 128
	maxStore         = 1000 // Pebble's default MaxOpenFiles
	maxBacklog       = 1024 // memcached's -b default
	minConns         = 16   // below this the limit is refused: kvd would hardly serve
	defaultSoMaxConn = 4096
	ceiling          = 1 << 24 // an unlimited or huge limit counts as this
)

// Plan is how a limit of open files is shared (see the package doc).
type Plan struct {
	Limit   int // the soft RLIMIT_NOFILE
	Store   int // Pebble's MaxOpenFiles
	Backlog int // the protocol listener's backlog
	Conns   int // the most open connections
}

// Of is the plan for a limit of limit descriptors, with the kernel's
// somaxconn (the largest listen backlog it grants).
func Of(limit, somaxconn int) Plan {
	limit = min(limit, ceiling)
	rest := limit - own
	p := Plan{Limit: limit, Store: min(maxStore, max(rest/4, 16)),
		Backlog: min(maxBacklog, max(somaxconn, 1), max(rest/8, 8))}
	p.Conns = rest - p.Store - p.Backlog
	return p
}

// Current is the plan for this process's limit now.
func Current() Plan {
	var rl syscall.Rlimit
	limit := ceiling
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && uint64(rl.Cur) < uint64(ceiling) { // int64 on some BSDs
		limit = int(rl.Cur)
	}
	return Of(limit, somaxconn())
}

// somaxconn reads the kernel's largest listen backlog (Linux), or assumes
// defaultSoMaxConn.
func somaxconn() int {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return defaultSoMaxConn
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return defaultSoMaxConn
	}
	return n
}

// Err says why the plan's limit is too low to serve with, or is nil.
func (p Plan) Err() error {
	if p.Conns >= minConns {
		return nil
	}
	need := p.Limit - p.Conns + minConns
	return fmt.Errorf("the open-file limit (ulimit -n) is %d: kvd needs at least %d (%d for itself, %d for the store's tables, %d for the listen backlog, %d connections)",
		p.Limit, need, own, p.Store, p.Backlog, minConns)
}

// SetBacklog sets the backlog of the listening socket that dup returns a
// copy of (gnet.Engine.Dup) to n: Linux lets listen be called again on a
// listening socket to change it. The copy is closed.
func SetBacklog(dup func() (int, error), n int) error {
	fd, err := dup()
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Listen(fd, n)
}
