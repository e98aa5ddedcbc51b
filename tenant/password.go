package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Parameters of the hashes HashPassword makes: RFC 9106's second
// recommended option (64 MiB, one pass) with two lanes, a 16-byte salt and
// a 32-byte tag, the same defaults as the reference argon2 CLI.
const (
	hashMemoryKiB = 64 * 1024
	hashTime      = 1
	hashThreads   = 2
	hashSaltLen   = 16
	hashKeyLen    = 32
)

// Bounds on the argon2id parameters a configured hash may ask for. The
// lower bounds are the algorithm's; the upper ones keep a typo in a config
// file (m=4194304) from making every login allocate gigabytes.
const (
	maxMemoryKiB = 1 << 20 // 1 GiB per verification
	maxTime      = 64
	minSaltLen   = 8
	minKeyLen    = 4
	maxKeyLen    = 1024
	argon2V19    = 19 // the only version x/crypto implements (0x13)

	bcryptLen     = 60 // "$2b$" + 2-digit cost + "$" + 53 characters
	maxBcryptCost = 16 // about 5 s per login; 31 would take days
)

// hashSlots bounds how many slow verifications run at once, so that a
// burst of SASL_AUTH requests costs at most len(hashSlots) × m KiB of
// memory instead of one argon2 arena per connection.
var hashSlots = make(chan struct{}, min(runtime.GOMAXPROCS(0), 8))

// verifier checks a password against what a user was configured with.
type verifier interface {
	verify(password []byte) bool
}

// HashPassword returns an argon2id hash of password in PHC form, exactly as
// the reference argon2 CLI prints it with "-id -t 1 -m 16 -p 2 -l 32 -e":
//
//	$argon2id$v=19$m=65536,t=1,p=2$<salt>$<tag>
//
// with salt (16 random bytes) and tag in unpadded standard base64. The
// result is what a config file's "password_hash" takes.
func HashPassword(password string) (string, error) {
	salt := make([]byte, hashSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("tenant: reading random salt: %w", err)
	}
	return hashWithSalt([]byte(password), salt), nil
}

// hashWithSalt formats the argon2id hash of password with the default
// parameters and the given salt.
func hashWithSalt(password, salt []byte) string {
	v := argon2Verifier{memory: hashMemoryKiB, time: hashTime, threads: hashThreads, salt: salt}
	v.key = v.derive(password, hashKeyLen)
	return v.String()
}

// newVerifier returns the verifier for a configured password or hash.
// Exactly one of password and hash is non-empty (NewUser checks).
func newVerifier(password, hash string) (verifier, error) {
	switch {
	case password != "":
		return newPlainVerifier(password), nil
	case strings.HasPrefix(hash, "$argon2id$"):
		return parseArgon2id(hash)
	case strings.HasPrefix(hash, "$2a$"), strings.HasPrefix(hash, "$2b$"),
		strings.HasPrefix(hash, "$2y$"):
		return parseBcrypt(hash)
	default:
		return nil, fmt.Errorf("unsupported scheme (want $argon2id$ or $2a$/$2b$/$2y$ bcrypt)")
	}
}

// plainVerifier compares SHA-256 digests in constant time, so neither the
// content nor the length of the configured password leaks through timing.
type plainVerifier struct{ digest [sha256.Size]byte }

func newPlainVerifier(password string) plainVerifier {
	return plainVerifier{digest: sha256.Sum256([]byte(password))}
}

func (v plainVerifier) verify(password []byte) bool {
	d := sha256.Sum256(password)
	return subtle.ConstantTimeCompare(d[:], v.digest[:]) == 1
}

// argon2Verifier holds a decoded argon2id PHC string.
type argon2Verifier struct {
	memory    uint32 // KiB
	time      uint32
	threads   uint8
	salt, key []byte
}

func (v argon2Verifier) derive(password []byte, keyLen uint32) []byte {
	return argon2.IDKey(password, v.salt, v.time, v.memory, v.threads, keyLen)
}

func (v argon2Verifier) verify(password []byte) bool {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	got := v.derive(password, uint32(len(v.key)))
	return subtle.ConstantTimeCompare(got, v.key) == 1
}

// String formats v in the reference CLI's PHC form.
func (v argon2Verifier) String() string {
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2V19,
		v.memory, v.time, v.threads, b64.EncodeToString(v.salt), b64.EncodeToString(v.key))
}

// parseArgon2id decodes "$argon2id$v=19$m=M,t=T,p=P$salt$tag". The
// parameters may come in any order but each exactly once; salt and tag are
// unpadded standard base64, as the reference CLI writes them.
func parseArgon2id(s string) (argon2Verifier, error) {
	var v argon2Verifier
	parts := strings.Split(s, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, tag
	if len(parts) != 6 {
		return v, fmt.Errorf("argon2id: want 5 $-separated fields, got %d", len(parts)-1)
	}
	if parts[2] != "v="+strconv.Itoa(argon2V19) {
		return v, fmt.Errorf("argon2id: unsupported version %q (want v=19)", parts[2])
	}
	if err := v.parseParams(parts[3]); err != nil {
		return v, err
	}
	var err error
	if v.salt, err = base64.RawStdEncoding.Strict().DecodeString(parts[4]); err != nil {
		return v, fmt.Errorf("argon2id: salt is not unpadded base64: %v", err)
	}
	if v.key, err = base64.RawStdEncoding.Strict().DecodeString(parts[5]); err != nil {
		return v, fmt.Errorf("argon2id: hash is not unpadded base64: %v", err)
	}
	if len(v.salt) < minSaltLen {
		return v, fmt.Errorf("argon2id: salt of %d bytes, want at least %d", len(v.salt), minSaltLen)
	}
	if len(v.key) < minKeyLen || len(v.key) > maxKeyLen {
		return v, fmt.Errorf("argon2id: hash of %d bytes, want %d..%d", len(v.key), minKeyLen, maxKeyLen)
	}
	return v, nil
}

// parseParams reads "m=M,t=T,p=P" into v and checks the bounds.
func (v *argon2Verifier) parseParams(s string) error {
	seen := map[string]uint64{}
	for _, kv := range strings.Split(s, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || (k != "m" && k != "t" && k != "p") {
			return fmt.Errorf("argon2id: bad parameter %q (want m=,t=,p=)", kv)
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("argon2id: parameter %q given twice", k)
		}
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return fmt.Errorf("argon2id: parameter %q is not a number", kv)
		}
		seen[k] = n
	}
	if len(seen) != 3 {
		return fmt.Errorf("argon2id: parameters %q, want all of m, t and p", s)
	}
	m, t, p := seen["m"], seen["t"], seen["p"]
	switch {
	case p < 1 || p > 255:
		return fmt.Errorf("argon2id: p=%d, want 1..255", p)
	case t < 1 || t > maxTime:
		return fmt.Errorf("argon2id: t=%d, want 1..%d", t, maxTime)
	case m < 8*p || m > maxMemoryKiB:
		return fmt.Errorf("argon2id: m=%d KiB, want %d..%d (at least 8 per lane)", m, 8*p, maxMemoryKiB)
	}
	v.memory, v.time, v.threads = uint32(m), uint32(t), uint8(p)
	return nil
}

// bcryptVerifier holds a bcrypt hash, checked by x/crypto/bcrypt (which
// compares in constant time).
type bcryptVerifier struct{ hash []byte }

func parseBcrypt(s string) (bcryptVerifier, error) {
	if len(s) != bcryptLen {
		return bcryptVerifier{}, fmt.Errorf("bcrypt: %d characters, want %d", len(s), bcryptLen)
	}
	cost, err := bcrypt.Cost([]byte(s))
	if err != nil {
		return bcryptVerifier{}, fmt.Errorf("bcrypt: %v", err)
	}
	if cost > maxBcryptCost {
		return bcryptVerifier{}, fmt.Errorf("bcrypt: cost %d, want at most %d", cost, maxBcryptCost)
	}
	return bcryptVerifier{hash: []byte(s)}, nil
}

func (v bcryptVerifier) verify(password []byte) bool {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	return bcrypt.CompareHashAndPassword(v.hash, password) == nil
}

// dummyVerifier is what Authenticate checks an unknown user's password
// against: argon2id at HashPassword's parameters with a random salt and
// tag, so it costs what a real login costs and never matches.
var dummyVerifier = func() argon2Verifier {
	b := make([]byte, hashSaltLen+hashKeyLen)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return argon2Verifier{memory: hashMemoryKiB, time: hashTime, threads: hashThreads,
		salt: b[:hashSaltLen], key: b[hashSaltLen:]}
}()
