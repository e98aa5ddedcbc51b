package tenant

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Hashes printed by the reference argon2 CLI (Debian package argon2,
// 0~20171227), e.g. `echo -n app-secret | argon2 kvd-fixed-salt16 -id -t 1
// -m 16 -p 2 -l 32 -e`.
const (
	// HashPassword's parameters, salt "kvd-fixed-salt16", password "app-secret".
	refDefaultParams = "$argon2id$v=19$m=65536,t=1,p=2$a3ZkLWZpeGVkLXNhbHQxNg$nXepC5DJ7lqcUeFgg6wOpophvQ0Y4//wRquqBkxfZ0o"
	// -t 3 -m 12 -p 4 -l 24, salt "kvdsaltkvdsalt", password "tenant-ref-pw".
	refOtherParams = "$argon2id$v=19$m=4096,t=3,p=4$a3Zkc2FsdGt2ZHNhbHQ$dcX5Ai5iO1SEAQz20GRuQp7hCngfzzY0"
	// -t 3 -m 12 -p 1 -l 32, salt "randomsaltishard", password "password".
	refOneLane = "$argon2id$v=19$m=4096,t=3,p=1$cmFuZG9tc2FsdGlzaGFyZA$DYojYpnUWSMmTtrkVXyaNWVGxLmGe1n8VJBPDdFkbjU"
)

var phcDefault = regexp.MustCompile(`^\$argon2id\$v=19\$m=65536,t=1,p=2\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)

func TestHashPasswordRoundTrip(t *testing.T) {
	h1, err := HashPassword("app-secret")
	if err != nil {
		t.Fatal(err)
	}
	if !phcDefault.MatchString(h1) {
		t.Fatalf("HashPassword = %q, not the reference CLI format", h1)
	}
	h2, err := HashPassword("app-secret")
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 {
		t.Fatalf("two hashes of one password are equal (salt not random): %q", h1)
	}
	v, err := newVerifier("", h1)
	if err != nil {
		t.Fatalf("own hash does not parse: %v", err)
	}
	if !v.verify([]byte("app-secret")) {
		t.Error("own hash does not verify its password")
	}
	if v.verify([]byte("app-secreT")) {
		t.Error("own hash verifies a wrong password")
	}
}

func TestHashMatchesReferenceCLI(t *testing.T) {
	if got := hashWithSalt([]byte("app-secret"), []byte("kvd-fixed-salt16")); got != refDefaultParams {
		t.Fatalf("hashWithSalt = %q\nreference CLI = %q", got, refDefaultParams)
	}
}

func TestVerifyForeignHashes(t *testing.T) {
	bc, err := bcrypt.GenerateFromPassword([]byte("bc-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	bcTail := strings.TrimPrefix(string(bc), "$2a$")
	tests := []struct {
		name, hash, good string
	}{
		{"argon2id reference default params", refDefaultParams, "app-secret"},
		{"argon2id reference m=4096 t=3 p=4 l=24", refOtherParams, "tenant-ref-pw"},
		{"argon2id reference p=1", refOneLane, "password"},
		{"argon2id params reordered", strings.Replace(refOneLane, "m=4096,t=3,p=1", "p=1,t=3,m=4096", 1), "password"},
		{"bcrypt $2a$", string(bc), "bc-pw"},
		{"bcrypt $2b$", "$2b$" + bcTail, "bc-pw"},
		{"bcrypt $2y$", "$2y$" + bcTail, "bc-pw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := NewUser("u", "", tt.hash, nil, nil)
			if err != nil {
				t.Fatalf("NewUser: %v", err)
			}
			if u.UsesPlainPassword() {
				t.Error("hashed user reports a plain password")
			}
			if !u.CheckPassword([]byte(tt.good)) {
				t.Errorf("right password rejected")
			}
			for _, bad := range []string{"", tt.good + "x", strings.ToUpper(tt.good)} {
				if u.CheckPassword([]byte(bad)) {
					t.Errorf("wrong password %q accepted", bad)
				}
			}
		})
	}
}

func TestMalformedHashes(t *testing.T) {
	const salt, key = "a3ZkLWZpeGVkLXNhbHQxNg", "nXepC5DJ7lqcUeFgg6wOpophvQ0Y4//wRquqBkxfZ0o"
	argon := func(version, params, s, k string) string {
		return "$argon2id$" + version + "$" + params + "$" + s + "$" + k
	}
	bc, err := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, hash, want string }{
		{"plain text", "hunter2", "unsupported scheme"},
		{"argon2i", strings.Replace(refOneLane, "argon2id", "argon2i", 1), "unsupported scheme"},
		{"scrypt", "$scrypt$ln=16,r=8,p=1$c2FsdA$aGFzaA", "unsupported scheme"},
		{"missing version", "$argon2id$m=65536,t=1,p=2$" + salt + "$" + key, "5 $-separated fields"},
		{"old version", argon("v=16", "m=65536,t=1,p=2", salt, key), "unsupported version"},
		{"missing hash", "$argon2id$v=19$m=65536,t=1,p=2$" + salt, "got 4"},
		{"extra field", argon("v=19", "m=65536,t=1,p=2", salt, key) + "$x", "fields"},
		{"missing p", argon("v=19", "m=65536,t=1", salt, key), "all of m, t and p"},
		{"duplicate m", argon("v=19", "m=65536,m=65536,t=1", salt, key), "given twice"},
		{"unknown param", argon("v=19", "m=65536,t=1,p=2,x=1", salt, key), "bad parameter"},
		{"non-numeric", argon("v=19", "m=lots,t=1,p=2", salt, key), "not a number"},
		{"t=0", argon("v=19", "m=65536,t=0,p=2", salt, key), "t=0"},
		{"t too large", argon("v=19", "m=65536,t=65,p=2", salt, key), "t=65"},
		{"p=0", argon("v=19", "m=65536,t=1,p=0", salt, key), "p=0"},
		{"p=256", argon("v=19", "m=65536,t=1,p=256", salt, key), "p=256"},
		{"m below 8 per lane", argon("v=19", "m=15,t=1,p=2", salt, key), "m=15"},
		{"m above 1 GiB", argon("v=19", "m=2097152,t=1,p=2", salt, key), "m=2097152"},
		{"padded salt", argon("v=19", "m=65536,t=1,p=2", salt+"==", key), "salt is not unpadded base64"},
		{"bad hash base64", argon("v=19", "m=65536,t=1,p=2", salt, key[:20]+"!"), "hash is not unpadded base64"},
		{"short salt", argon("v=19", "m=65536,t=1,p=2", "c2FsdA", key), "salt of 4 bytes"},
		{"short hash", argon("v=19", "m=65536,t=1,p=2", salt, "aGFz"), "hash of 3 bytes"},
		{"bcrypt truncated", string(bc[:59]), "59 characters"},
		{"bcrypt cost 3", "$2a$03$" + string(bc[7:]), "bcrypt"},
		{"bcrypt cost 17", "$2a$17$" + string(bc[7:]), "cost 17"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewUser("victim", "", tt.hash, []string{"*"}, nil)
			if !errors.Is(err, ErrInvalidHash) {
				t.Fatalf("NewUser(%q) error = %v, want ErrInvalidHash", tt.hash, err)
			}
			for _, want := range []string{`"victim"`, tt.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestPlainPassword(t *testing.T) {
	u, err := NewUser("dev", "change-me", "", []string{"*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !u.UsesPlainPassword() {
		t.Error("UsesPlainPassword = false for a plain password")
	}
	for pw, want := range map[string]bool{
		"change-me": true, "change-m": false, "change-me\x00": false, "": false, "CHANGE-ME": false,
	} {
		if got := u.CheckPassword([]byte(pw)); got != want {
			t.Errorf("CheckPassword(%q) = %v, want %v", pw, got, want)
		}
	}
}

// The dummy verification for unknown users must cost what a real login
// against a HashPassword hash costs: same parameters and sizes.
func TestDummyVerifierMatchesHashPassword(t *testing.T) {
	h, err := HashPassword("x")
	if err != nil {
		t.Fatal(err)
	}
	v, err := parseArgon2id(h)
	if err != nil {
		t.Fatal(err)
	}
	d := dummyVerifier
	if d.memory != v.memory || d.time != v.time || d.threads != v.threads ||
		len(d.salt) != len(v.salt) || len(d.key) != len(v.key) {
		t.Fatalf("dummy verifier %s differs from HashPassword's %s", d, v)
	}
}

// Slow verifications wait for a slot; they cannot run while all are taken.
func TestHashSlotsBoundConcurrency(t *testing.T) {
	bc, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parseBcrypt(string(bc))
	if err != nil {
		t.Fatal(err)
	}
	for range cap(hashSlots) {
		hashSlots <- struct{}{}
	}
	done := make(chan bool)
	go func() { done <- v.verify([]byte("pw")) }()
	select {
	case <-done:
		t.Fatal("verification ran while every hash slot was taken")
	case <-time.After(50 * time.Millisecond):
	}
	for range cap(hashSlots) {
		<-hashSlots
	}
	if ok := <-done; !ok {
		t.Fatal("verification failed after slots were freed")
	}
}
