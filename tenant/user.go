package tenant

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
)

// Privilege is a set of rights beyond selecting a bucket, as bits.
type Privilege uint8

const (
	// PrivBucketThrottleManagement may change node and bucket throttle
	// settings and create and delete buckets (opcodes 0x2a, 0x2c, 0x85,
	// 0x86).
	PrivBucketThrottleManagement Privilege = 1 << iota
	// PrivUnthrottled is never throttled and never queued for an ingress
	// ticket; its units are still charged to the bucket and node gauges.
	PrivUnthrottled
	// PrivStats may read every bucket's details.
	PrivStats
)

// privilegeNames lists the config-file name of each bit, in bit order.
var privilegeNames = [...]struct {
	name string
	bit  Privilege
}{
	{"BucketThrottleManagement", PrivBucketThrottleManagement},
	{"Unthrottled", PrivUnthrottled},
	{"Stats", PrivStats},
}

// ParsePrivilege returns the privilege a config file names. Names are case
// sensitive; an unknown name is an ErrUnknownPrivilege error naming it.
func ParsePrivilege(name string) (Privilege, error) {
	for _, p := range privilegeNames {
		if p.name == name {
			return p.bit, nil
		}
	}
	return 0, fmt.Errorf("%w %q (known: BucketThrottleManagement, Unthrottled, Stats)",
		ErrUnknownPrivilege, name)
}

// Has reports whether p includes every bit of q.
func (p Privilege) Has(q Privilege) bool { return p&q == q }

// String returns the names of p's bits joined by "|", "none" for the empty
// set, and "0x.." for bits without a name.
func (p Privilege) String() string {
	if p == 0 {
		return "none"
	}
	names := make([]string, 0, bits.OnesCount8(uint8(p)))
	rest := p
	for _, n := range privilegeNames {
		if p.Has(n.bit) {
			names = append(names, n.name)
			rest &^= n.bit
		}
	}
	if rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint8(rest)))
	}
	return strings.Join(names, "|")
}

// AllBuckets is the bucket-list entry that lets a user select every bucket.
const AllBuckets = "*"

// maxUserNameLen bounds a user name; SASL PLAIN carries it NUL-separated.
const maxUserNameLen = 255

// User is one configured account. A *User is immutable after NewUser
// returns (callers must not modify its exported fields) and safe for
// concurrent use.
type User struct {
	Name       string
	Privileges Privilege

	allBuckets bool                // buckets included "*"
	buckets    map[string]struct{} // the buckets it may select, unless allBuckets
	verifier   verifier
	plain      bool     // configured with a plain password
	credential [32]byte // SHA-256 of what the config file gave: the plain password or the hash
}

// NewUser builds a user from its config-file fields. Exactly one of
// password and passwordHash must be set; passwordHash is an argon2id PHC
// string (parameters taken from the string) or a bcrypt hash. buckets are
// the bucket names the user may select, "*" meaning all; privileges are
// ParsePrivilege names. Every error names the user.
func NewUser(name, password, passwordHash string, buckets, privileges []string) (*User, error) {
	if err := checkUserName(name); err != nil {
		return nil, err
	}
	if (password == "") == (passwordHash == "") {
		return nil, fmt.Errorf("%w %q: set exactly one of password and password_hash", ErrInvalidUser, name)
	}
	v, err := newVerifier(password, passwordHash)
	if err != nil {
		return nil, fmt.Errorf("%w for user %q: %v", ErrInvalidHash, name, err)
	}
	u := &User{Name: name, verifier: v, plain: password != "", buckets: make(map[string]struct{}, len(buckets)),
		credential: sha256.Sum256([]byte(password + "\x00" + passwordHash))}
	for _, b := range buckets {
		if b == AllBuckets {
			u.allBuckets = true
			continue
		}
		if err := ValidBucketName(b); err != nil {
			return nil, fmt.Errorf("%w %q: buckets: %v", ErrInvalidUser, name, err)
		}
		u.buckets[b] = struct{}{}
	}
	for _, p := range privileges {
		bit, err := ParsePrivilege(p)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
		u.Privileges |= bit
	}
	return u, nil
}

// SameCredentials reports whether u and o were configured with the same
// password or password hash: a reload that changes a user's password ends
// the connections that logged in with the old one (a leaked password is
// rotated to shut its holder out).
func (u *User) SameCredentials(o *User) bool { return u.credential == o.credential }

func checkUserName(name string) error {
	if name == "" || len(name) > maxUserNameLen {
		return fmt.Errorf("%w %q: name must be 1..%d bytes", ErrInvalidUser, name, maxUserNameLen)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w %q: name contains a NUL byte", ErrInvalidUser, name)
	}
	return nil
}

// CanSelect reports whether u may select bucket.
func (u *User) CanSelect(bucket string) bool {
	if u.allBuckets {
		return true
	}
	_, ok := u.buckets[bucket]
	return ok
}

// CheckPassword reports whether password is u's password, comparing in
// constant time. For a hashed password it costs the hash's work (about
// 50 ms and 64 MiB at HashPassword's parameters) and may wait for a hash
// slot: never call it on an event loop.
func (u *User) CheckPassword(password []byte) bool {
	return u.verifier.verify(password)
}

// UsesPlainPassword reports whether u was configured with a plain
// "password" instead of a "password_hash" (the daemon logs a warning).
func (u *User) UsesPlainPassword() bool { return u.plain }

// Users is the set of configured users, looked up by name. It is safe for
// concurrent use; Replace swaps the whole set at once (config reload), and
// *User values handed out before stay valid.
type Users struct {
	byName atomic.Pointer[map[string]*User] // the map is never modified once stored
}

// NewUsers returns the set of list; two users with one name is an
// ErrDuplicateUser error.
func NewUsers(list []*User) (*Users, error) {
	us := &Users{}
	if err := us.Replace(list); err != nil {
		return nil, err
	}
	return us, nil
}

// Replace makes list the whole set. On error (a duplicate name) the set
// is unchanged.
func (us *Users) Replace(list []*User) error {
	m := make(map[string]*User, len(list))
	for _, u := range list {
		if u == nil {
			return fmt.Errorf("%w: nil user in list", ErrInvalidUser)
		}
		if _, dup := m[u.Name]; dup {
			return fmt.Errorf("%w %q", ErrDuplicateUser, u.Name)
		}
		m[u.Name] = u
	}
	us.byName.Store(&m)
	return nil
}

// Lookup returns the user called name.
func (us *Users) Lookup(name string) (*User, bool) {
	m := us.byName.Load()
	if m == nil {
		return nil, false
	}
	u, ok := (*m)[name]
	return u, ok
}

// Authenticate returns the user called name if password is theirs. An
// unknown user and a wrong password both return exactly ErrAuthFailed, and
// an unknown user still pays for an argon2id verification at
// HashPassword's parameters, so neither the error nor the time tells
// whether the name exists. Never call it on an event loop.
func (us *Users) Authenticate(name string, password []byte) (*User, error) {
	u, ok := us.Lookup(name)
	if !ok {
		dummyVerifier.verify(password)
		return nil, ErrAuthFailed
	}
	if !u.CheckPassword(password) {
		return nil, ErrAuthFailed
	}
	return u, nil
}

// ParsePlain reads SASL PLAIN credentials (RFC 4616): authzid NUL authcid
// NUL password. The mechanism must be PLAIN and the authorization identity
// empty or the user's own: a user cannot ask to act as another. Errors say
// why, for the client.
func ParsePlain(mech string, value []byte) (name string, password []byte, err error) {
	parts := bytes.SplitN(value, []byte{0}, 3)
	switch {
	case mech != "PLAIN":
		return "", nil, errors.New("unsupported mechanism: use PLAIN")
	case len(parts) < 3:
		return "", nil, errors.New("malformed PLAIN credentials")
	case len(parts[0]) > 0 && !bytes.Equal(parts[0], parts[1]):
		return "", nil, errors.New("PLAIN authorization identity must be empty or the user's own")
	}
	return string(parts[1]), parts[2], nil
}
