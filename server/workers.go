package server

import "runtime"

// workQueueLen bounds the batches waiting for a worker; past it the loop
// starts a goroutine of its own for the batch rather than wait.
const workQueueLen = 4096

// workers is the pool of goroutines that execute batches off the event
// loops. They live as long as the server, so their stacks, grown once by
// Pebble's deep call paths, are reused rather than regrown per batch.
type workers struct {
	queue chan *batch
	done  chan struct{}
}

func (s *Server) startWorkers() {
	n := max(16, 8*runtime.GOMAXPROCS(0))
	s.work = workers{queue: make(chan *batch, workQueueLen), done: make(chan struct{})}
	for range n {
		go s.worker()
	}
}

func (s *Server) worker() {
	for {
		select {
		case b := <-s.work.queue:
			s.run(b)
		case <-s.work.done:
			return
		}
	}
}

// submit hands b to a worker without ever blocking the loop.
func (s *Server) submit(b *batch) {
	s.jobs.Add(1)
	select {
	case s.work.queue <- b:
	default:
		go s.run(b)
	}
}

// stopWorkers ends the pool once every submitted batch has run.
func (s *Server) stopWorkers() {
	s.jobs.Wait()
	close(s.work.done)
}
