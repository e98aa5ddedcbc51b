// Package work runs data commands off the event loops. A loop copies
// consecutive commands of one connection into a Batch and hands it to the
// Pool; one of the pool's long-lived workers executes them in order
// against the bucket (package command), meters them, and hands the batch
// back to its Owner, the connection, through the connection's Mailbox;
// the connection's loop writes the replies. A batch whose command waits
// for an ingress ticket is an ingress.Waiter: it goes to a worker when a
// ticket is granted, or back with 0x86 when its wait times out or its
// deadline passes.
//
// With wal_sync on, a batch with mutations is not acknowledged by its
// worker: it joins the engine's group commit (engine.GroupSync), and its
// replies are encoded once the fsync that covers it is done, so batches of
// many connections share each fsync and none is acknowledged before it.
//
// Invariants: a connection has at most one batch out (queued for a ticket,
// queued for a worker, running or waiting for its fsync), so no queue here
// holds more batches than there are connections and none needs a bound of
// its own; a batch's replies are in request order; every ticket and
// deadline grant a batch holds is given back exactly once.
//
// Pool and Batch are safe for concurrent use as documented on each method;
// a batch belongs to one goroutine at a time (its loop, the ticket queue, a
// worker, the group sync), handed on with it.
package work
