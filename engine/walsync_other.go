//go:build !linux

package engine

import "github.com/cockroachdb/pebble/v2/vfs"

// newWALFile: outside Linux a WAL file syncs as Pebble's file does.
func newWALFile(f vfs.File) vfs.File { return f }
