// Package command is a data command as the server carries it once it has
// been decoded: the record it is copied into so that it can outlive the
// loop pass that read it (Request), what it does to a bucket and what that
// costs in units (Exec, Units), and how its answer and the server's other
// replies are encoded for the connection that asked (Encoder, StatusOf).
//
// It knows memcached's binary opcodes and, through package translate, the
// text and meta replies; it knows nothing of connections, event loops or
// workers: package server decides when a command runs and where its reply
// goes.
package command
