// Package netmem owns kvd's network memory budget: the bytes the client
// connections hold in gnet's buffers (input not decoded yet, such as an
// unfinished frame or a pipeline waiting behind a batch, and replies the
// client has not read yet), their node-wide total against
// max_buffer_bytes, which connections stop being read and when they go on,
// which connection is closed as the last resort, and when freed memory goes
// back to the OS. Without a bound a client that never reads, or that starts
// a large frame and stalls, costs the node as much memory as it likes.
//
// A [Budget] is the node's view; each connection embeds a [Holder], its
// share. When a frame's header has come and the rest has not, the
// connection asks [Budget.Admit] whether it may read on: a frame up to
// [SmallFrame] always, a larger one only while the node's total and all of
// it fit the budget. Refused, the frame is answered at its header and its
// body discarded as it comes; admitted, it is held at its full length from
// then on. So the unfinished frames cannot add up past the budget however
// many connections start one, and a connection holds at most SmallFrame of
// a frame that was not admitted. At the end of every pass of its event loop
// the connection calls [Budget.Account] with what gnet holds for it (and
// the length of its admitted frame), and the budget decides:
//
//   - past [Limits].ConnBuffer (input or output alone) the connection is to
//     be closed;
//   - while its unsent replies pass [Limits].ConnOutput it is paused for
//     output, until they drain under half of it;
//   - while a batch of its commands runs, its next command waits for a
//     ticket or the throttle, or its output or memory stops it ([Busy]), it
//     is not read: a client that pipelines faster than its commands run is
//     pushed back by TCP, and a client's end of file, on which gnet closes
//     the connection, waits in the socket until every command before it is
//     answered. (A client that leaves while its command waits is therefore
//     seen when the command has run, unless its socket is reset: a bulk
//     load that half-closes after its last command must not lose the
//     commands still waiting, as it did while waiting connections were read
//     on to see a client leave.) While its login waits for its turn
//     ([Waiting]) it is read up to [Limits].ConnWaiting, so that a client
//     that leaves is seen and its attempt takes no turn;
//   - while gnet holds replies its socket did not take, it is not read
//     either, as memcached does not read while it writes: gnet closes a
//     connection whose end of file it reads and drops what it could not
//     send, so a client that half-closes after a large pipeline and reads
//     later would lose replies. gnet turns reading back on when it has sent
//     them all;
//   - while the node's total is over [Limits].Budget, a connection holding
//     at least [PauseFloor] besides its admitted frame is paused for
//     memory: it stops being read and served, and the client's further
//     bytes wait in the kernel while TCP pushes back. (Pausing the reader of
//     an admitted frame would free nothing: it finishes it.)
//
// The server's housekeeping calls [Budget.Tick] every few milliseconds. It
// wakes the paused connections (gnet tells nobody when an outbound buffer
// drains, so a pass must look again): one whose figures changed at the
// next tick, one whose figures stand after a gap that doubles up to
// [MaxWakeGap] ticks. It lets memory-paused connections go on,
// those holding the least first, while the total stays under 3/4 of the
// budget, and without room, when the total has not fallen for
// [ForceEvery], one holding at least [PauseFloor] of commands whose client
// has read every reply (they can drain only by running), one at a time and
// in turn (the one let go on longest ago first); as the last resort closes
// the connections holding the most, as many as it takes to bring the total
// under 3/4 of the budget, when the node has gone [CloseGrace] without room
// (over its budget, or over 3/4 of it while connections are paused for
// memory and none can be let go on) or is over twice its budget, at most
// once per [CloseEvery]; logs the frames Admit refused, at
// most a line a second; and returns freed memory to the OS
// once the connections hold a quarter of their peak or less (at least
// [FreeOSMin] of peak, at most every [FreeOSEvery]).
//
// Pausing is about gnet: gnet reads every readable socket into its inbound
// buffer and has no call to stop. A Holder takes the socket's read interest
// out of its loop's epoll set, the loop's own poller, found once per
// connection through gnet's internals (poll_linux.go, for the pinned gnet
// v2.10; when they do not match, pausing is off with one warning in the
// log, and the output stop and the close limits remain). That is why this
// package may import gnet; the accounting itself only needs a [Conn].
//
// # Invariants
//
//   - The node's total is the sum of the figures its open Holders last
//     accounted; [Budget.Forget] takes a closing connection's share out for
//     good (a pass can go on after gnet closed its connection inside a
//     write: what it accounts or admits then counts nowhere).
//   - A Holder is in the budget's paused set exactly while it has a pause
//     reason, and while it has one its socket is not read (where pausing
//     works). A memory pause ends only through Tick (or [Budget.Unpause]
//     at shutdown), never because one pass found the node under budget: the
//     resumption order is the budget's, smallest holder first.
//   - Connections holding less than [PauseFloor] besides an admitted frame
//     are never paused for memory: a normal client's pipeline of small
//     commands goes on.
//   - An admitted frame counts at its full length in the total until it
//     has arrived; Admit refuses a frame larger than SmallFrame that would
//     take the total past the budget, so the admitted frames alone never
//     pass it (up to one frame per event loop admitted at the same moment);
//     and one group's (a bucket's) admitted frames stay within half of what
//     the other groups' leave, so that no number of groups fills it.
//
// # Time and concurrency
//
// Time is an argument: Tick takes now; the package never reads the clock.
// A Holder belongs to its connection's event loop: Account, Forget and
// Unpause are called only there. Tick is called from one goroutine (the
// server's housekeeping); it touches a Holder only through atomics and
// through its Conn's Wake and Close, which gnet makes safe from any
// goroutine. [Budget.Stats] is safe from any goroutine.
package netmem
