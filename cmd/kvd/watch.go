package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"time"

	"kvd/config"
	"kvd/server"
)

// watchPeriod is how often the config file is checked: edits apply well
// within the 10 s SPEC section 7 allows.
const watchPeriod = 2 * time.Second

// watcher re-reads the config file when it changes and hands it to the
// server. An invalid edit is logged in one line that names the field and
// ignored: the running config stays. An edit the server could not apply
// (etcd unreachable, a conflict with run-time settings) is tried again,
// after 2 s, then twice as long each time up to maxRetry, until it applies
// or the file changes; a failure is logged again only when its reason
// changes.
type watcher struct {
	path    string
	last    []byte
	misses  int           // consecutive checks that could not read the file
	pending []byte        // an edit Reconfigure refused, tried again at retryAt
	retryAt time.Time     //
	backoff time.Duration // the wait before the next try of pending
	lastErr string        // why pending was refused last
	listen  string
	dataDir string
	srv     *server.Server
	log     *slog.Logger
	hup     <-chan os.Signal // SIGHUP: check the file now, a refused edit included
	stop    chan struct{}
	done    chan struct{}
}

// changed returns the file's bytes when they differ from the last seen,
// which become the last seen. A file that cannot be read keeps the running
// config; that is logged once it lasts two checks (a file being replaced
// may be briefly missing), and again when the file is back.
func (w *watcher) changed() ([]byte, bool) {
	data, err := os.ReadFile(w.path)
	if err != nil {
		if w.misses++; w.misses == 2 {
			w.log.Warn("config file unreadable, running config kept", "file", w.path, "err", err)
		}
		return nil, false
	}
	if w.misses >= 2 {
		w.log.Info("config file readable again", "file", w.path)
	}
	w.misses = 0
	if bytes.Equal(data, w.last) {
		return nil, false
	}
	w.last = data
	return data, true
}

// newWatcher watches path, whose running config was parsed from loaded.
// The file is compared with loaded, not re-read here: an edit between kvd's
// start and the watcher's is applied at the first check, not lost.
func newWatcher(path string, loaded []byte, listen, dataDir string, srv *server.Server, log *slog.Logger) *watcher {
	return &watcher{path: path, last: loaded, listen: listen, dataDir: dataDir, srv: srv, log: log,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// startWatcher starts a newWatcher's checks. A file whose edit the server
// refused at start is tried again like a reload's.
func startWatcher(path string, loaded []byte, listen, dataDir string, srv *server.Server, hup <-chan os.Signal, log *slog.Logger) *watcher {
	w := newWatcher(path, loaded, listen, dataDir, srv, log)
	w.hup = hup
	if err := srv.FileRefused(); err != nil {
		w.refused(loaded, err)
	}
	go w.run()
	return w
}

func (w *watcher) run() {
	defer close(w.done)
	t := time.NewTicker(watchPeriod)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.check()
		case <-w.hup:
			w.log.Info("SIGHUP: checking the config file now", "file", w.path)
			w.retryAt = time.Time{}
			w.check()
		}
	}
}

// maxRetry bounds the wait between tries of an edit the server refused.
const maxRetry = time.Minute

func (w *watcher) check() {
	data, edited := w.changed()
	switch {
	case edited:
		w.pending, w.backoff, w.lastErr = nil, 0, ""
	case w.pending != nil && !time.Now().Before(w.retryAt):
		data = w.pending
	default:
		return
	}
	cfg, err := config.Parse(data)
	if err == nil {
		err = checkConfig(cfg)
	}
	if err != nil {
		w.log.Error("config edit rejected, running config kept", "file", w.path, "err", err)
		return
	}
	opts := serverOptions(cfg, w.listen, w.dataDir, w.log)
	if fi, err := os.Stat(w.path); err == nil {
		opts.ConfigModTime = fi.ModTime()
	}
	warnOpenFiles(w.log, &opts)
	needRestart, err := w.srv.Reconfigure(opts)
	if err != nil {
		if w.refused(data, err) {
			msg := "config edit rejected, running config kept"
			if errors.Is(err, server.ErrFileConflict) {
				msg = "config edit rejected in part, running config kept for the buckets and node throttle; users, limits and ingress settings applied"
			}
			w.log.Error(msg, "file", w.path, "err", err, "retry_in", w.backoff.String())
		}
		return
	}
	w.pending = nil
	w.log.Info("config reloaded", "file", w.path)
	if len(needRestart) > 0 {
		w.log.Warn("config edits that take effect only after a restart", "settings", needRestart)
	}
}

// refused keeps data, an edit the server refused for err, to be tried
// again after the next backoff; it reports whether the reason is new.
func (w *watcher) refused(data []byte, err error) bool {
	w.backoff = min(max(2*w.backoff, watchPeriod), maxRetry)
	w.pending, w.retryAt = data, time.Now().Add(w.backoff)
	isNew := err.Error() != w.lastErr
	w.lastErr = err.Error()
	return isNew
}

// Stop ends the watcher.
func (w *watcher) Stop() {
	close(w.stop)
	<-w.done
}
