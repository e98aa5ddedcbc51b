package server

import (
	"errors"
	"strings"

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
	case errors.Is(err, engine.ErrBadBucketName):
		return binary.StatusInvalidArguments, reasonOf(err, engine.ErrBadBucketName)
	case errors.Is(err, tenant.ErrInvalidBucketName):
		return binary.StatusInvalidArguments, reasonOf(err, tenant.ErrInvalidBucketName)
	case errors.Is(err, tenant.ErrInvalidSettings):
		return binary.StatusInvalidArguments, reasonOf(err, tenant.ErrInvalidSettings)
	case errors.Is(err, tenant.ErrAuthFailed):
		return binary.StatusAuthError, "Auth failure"
	case errors.Is(err, engine.ErrClosed):
		return binary.StatusTemporaryFailure, "server is shutting down"
	}
	return binary.StatusInternal, err.Error()
}

// reasonOf is err's text for a client: the detail after the package's
// sentinel ("tenant: invalid settings: reserved 9 exceeds hard_limit 5"
// becomes "invalid settings: reserved 9 exceeds hard_limit 5").
func reasonOf(err, sentinel error) string {
	s := err.Error()
	if _, rest, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, sentinel.Error()) {
		return rest
	}
	return s
}
