package server

import (
	"errors"

	"kvd/engine"
	"kvd/protocol/binary"
	"kvd/tenant"
)

// statusOf is the one place Go errors from engine and tenant become protocol
// statuses, with the reason a client is told.
func statusOf(err error) (binary.Status, string) {
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return binary.StatusKeyNotFound, "Not found"
	case errors.Is(err, engine.ErrExists):
		return binary.StatusKeyExists, "Data exists for key."
	case errors.Is(err, engine.ErrNotStored):
		return binary.StatusNotStored, "Not stored."
	case errors.Is(err, engine.ErrNonNumeric):
		return binary.StatusNonNumeric, "Non-numeric server-side value for incr or decr"
	case errors.Is(err, engine.ErrTooBig):
		return binary.StatusTooBig, "Too large."
	case errors.Is(err, engine.ErrBucketExists):
		return binary.StatusKeyExists, "bucket already exists"
	case errors.Is(err, engine.ErrBucketNotFound):
		return binary.StatusKeyNotFound, "no such bucket"
	case errors.Is(err, engine.ErrBucketDeleted):
		return binary.StatusNoBucket, "the selected bucket was deleted"
	case errors.Is(err, engine.ErrBadBucketName), errors.Is(err, tenant.ErrInvalidSettings):
		return binary.StatusInvalidArguments, err.Error()
	case errors.Is(err, tenant.ErrAuthFailed):
		return binary.StatusAuthError, "Auth failure"
	case errors.Is(err, engine.ErrClosed):
		return binary.StatusTemporaryFailure, "server is shutting down"
	}
	return binary.StatusInternal, err.Error()
}
