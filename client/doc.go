// Package client is a small blocking client of the memcached binary
// protocol, as kvd speaks it, for tools: kvctl and tests. It is not a data
// path client (no pipelining, no pooling); it is meant to send a handful of
// admin and stats requests and to say clearly why the server refused one.
//
// Dial connects and runs the handshake kvd expects:
//
//	HELLO (agent name, features XERROR, SELECT_BUCKET, JSON by default)
//	SASL_AUTH PLAIN "\x00user\x00password"   when Options.User is set
//	SELECT_BUCKET bucket                    when Options.Bucket is set
//
// Then Conn.Do sends one request and reads its one reply, and Conn.Stats
// reads a STAT group up to its empty terminator. Every reply must echo the
// request's opaque and opcode; one that does not means the stream is out of
// step, and the Conn closes itself.
//
// # Errors
//
// A reply whose status is not StatusOK is a *StatusError carrying the
// server's reason: the context of an XERROR body
// {"error":{"context":"…"}}, or the body's text when the server sent no such
// JSON. Such a refusal leaves the Conn usable. A transport error (dial,
// write, read, deadline) or a reply out of step closes the Conn; every later
// call returns an error wrapping ErrClosed.
//
// # Concurrency
//
// A Conn is not safe for concurrent use: it is one blocking
// request/response stream, to be used by one goroutine at a time. The
// package starts no goroutines.
package client

import "errors"

// Sentinel errors; compare with errors.Is. Refusals by the server are
// *StatusError values instead (use errors.As).
var (
	// ErrClosed: the Conn was closed, by Close or after a transport error
	// (the error that closed it is in the message).
	ErrClosed = errors.New("client: connection closed")

	// ErrUnexpectedReply: a reply did not match the request in flight
	// (opaque or opcode), or was malformed. The Conn is closed.
	ErrUnexpectedReply = errors.New("client: unexpected reply")

	// ErrUnsupportedRequest: Do was given a request it cannot pair with
	// exactly one reply (a quiet opcode, or STAT: use Stats).
	ErrUnsupportedRequest = errors.New("client: unsupported request")

	// ErrInvalidOptions: Options.Validate refused the options.
	ErrInvalidOptions = errors.New("client: invalid options")
)
