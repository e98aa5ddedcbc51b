package tenant

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestParsePrivilege(t *testing.T) {
	tests := []struct {
		name string
		want Privilege
		err  bool
	}{
		{"BucketThrottleManagement", PrivBucketThrottleManagement, false},
		{"Unthrottled", PrivUnthrottled, false},
		{"Stats", PrivStats, false},
		{"stats", 0, true},
		{"Admin", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParsePrivilege(tt.name)
		if tt.err {
			if !errors.Is(err, ErrUnknownPrivilege) || !strings.Contains(err.Error(), `"`+tt.name+`"`) {
				t.Errorf("ParsePrivilege(%q) error = %v, want ErrUnknownPrivilege naming it", tt.name, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePrivilege(%q) = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

func TestPrivilegeHasAndString(t *testing.T) {
	all := PrivBucketThrottleManagement | PrivUnthrottled | PrivStats
	tests := []struct {
		p    Privilege
		str  string
		has  Privilege
		want bool
	}{
		{0, "none", PrivStats, false},
		{0, "none", 0, true},
		{PrivStats, "Stats", PrivStats, true},
		{PrivStats, "Stats", PrivUnthrottled, false},
		{PrivUnthrottled | PrivStats, "Unthrottled|Stats", PrivUnthrottled | PrivStats, true},
		{PrivUnthrottled | PrivStats, "Unthrottled|Stats", all, false},
		{all, "BucketThrottleManagement|Unthrottled|Stats", PrivBucketThrottleManagement, true},
		{PrivStats | 0x80, "Stats|0x80", PrivStats, true},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.str {
			t.Errorf("Privilege(%#x).String() = %q, want %q", uint8(tt.p), got, tt.str)
		}
		if got := tt.p.Has(tt.has); got != tt.want {
			t.Errorf("%v.Has(%v) = %v, want %v", tt.p, tt.has, got, tt.want)
		}
	}
}

func TestNewUserErrors(t *testing.T) {
	tests := []struct {
		name, user, pw, hash string
		buckets, privs       []string
		is                   error
		want                 string
	}{
		{"both password and hash", "u1", "pw", refOneLane, nil, nil, ErrInvalidUser, "exactly one"},
		{"neither", "u2", "", "", nil, nil, ErrInvalidUser, "exactly one"},
		{"empty name", "", "pw", "", nil, nil, ErrInvalidUser, "1..255 bytes"},
		{"long name", strings.Repeat("n", 256), "pw", "", nil, nil, ErrInvalidUser, "1..255 bytes"},
		{"NUL in name", "a\x00b", "pw", "", nil, nil, ErrInvalidUser, "NUL"},
		{"bad bucket", "u3", "pw", "", []string{"ok", "no spaces"}, nil, ErrInvalidUser, `"no spaces"`},
		{"empty bucket", "u4", "pw", "", []string{""}, nil, ErrInvalidUser, `buckets`},
		{"unknown privilege", "u5", "pw", "", nil, []string{"Stats", "Root"}, ErrUnknownPrivilege, `"Root"`},
		{"bad hash", "u6", "", "$argon2id$garbage", nil, nil, ErrInvalidHash, "argon2id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewUser(tt.user, tt.pw, tt.hash, tt.buckets, tt.privs)
			if !errors.Is(err, tt.is) {
				t.Fatalf("error = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if quoted := strconv.Quote(tt.user); tt.user != "" && !strings.Contains(err.Error(), quoted) {
				t.Errorf("error %q does not name user %q", err, tt.user)
			}
		})
	}
}

func TestCanSelect(t *testing.T) {
	tests := []struct {
		buckets []string
		yes, no []string
	}{
		{[]string{"*"}, []string{"app", "default", "anything"}, nil},
		{[]string{"app", "*"}, []string{"app", "other"}, nil},
		{[]string{"app", "logs"}, []string{"app", "logs"}, []string{"default", "App", "", "*"}},
		{nil, nil, []string{"app", "default", "*"}},
	}
	for _, tt := range tests {
		u, err := NewUser("u", "pw", "", tt.buckets, []string{"Stats"})
		if err != nil {
			t.Fatal(err)
		}
		if !u.Privileges.Has(PrivStats) || u.Privileges.Has(PrivUnthrottled) {
			t.Errorf("privileges = %v, want Stats", u.Privileges)
		}
		for _, b := range tt.yes {
			if !u.CanSelect(b) {
				t.Errorf("buckets %q: CanSelect(%q) = false", tt.buckets, b)
			}
		}
		for _, b := range tt.no {
			if u.CanSelect(b) {
				t.Errorf("buckets %q: CanSelect(%q) = true", tt.buckets, b)
			}
		}
	}
}

func mustUser(t *testing.T, name, pw, hash string) *User {
	t.Helper()
	u, err := NewUser(name, pw, hash, []string{"*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestUsersAuthenticate(t *testing.T) {
	us, err := NewUsers([]*User{mustUser(t, "dev", "dev-pw", ""), mustUser(t, "ref", "", refOneLane)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dev", "ref"} {
		if _, ok := us.Lookup(name); !ok {
			t.Fatalf("Lookup(%q) found nothing", name)
		}
	}
	tests := []struct {
		user, pw string
		ok       bool
	}{
		{"dev", "dev-pw", true},
		{"ref", "password", true},
		{"dev", "wrong", false},
		{"ref", "Password", false},
		{"nobody", "dev-pw", false},
		{"", "", false},
	}
	for _, tt := range tests {
		u, err := us.Authenticate(tt.user, []byte(tt.pw))
		if tt.ok {
			if err != nil || u == nil || u.Name != tt.user {
				t.Errorf("Authenticate(%q) = %v, %v; want the user", tt.user, u, err)
			}
			continue
		}
		// Exactly the sentinel: nothing in the error may tell an unknown
		// user from a wrong password.
		if err != ErrAuthFailed || u != nil {
			t.Errorf("Authenticate(%q, %q) = %v, %v; want nil, ErrAuthFailed", tt.user, tt.pw, u, err)
		}
	}
}

func TestUsersReplaceAndDuplicates(t *testing.T) {
	a, b := mustUser(t, "a", "1", ""), mustUser(t, "b", "2", "")
	if _, err := NewUsers([]*User{a, b, mustUser(t, "a", "3", "")}); !errors.Is(err, ErrDuplicateUser) ||
		!strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("duplicate: error = %v, want ErrDuplicateUser naming a", err)
	}
	us, err := NewUsers([]*User{a})
	if err != nil {
		t.Fatal(err)
	}
	if err := us.Replace([]*User{b, b}); !errors.Is(err, ErrDuplicateUser) {
		t.Fatalf("Replace with duplicate: %v", err)
	}
	if got, ok := us.Lookup("a"); !ok || got != a {
		t.Fatal("failed Replace changed the set")
	}
	if err := us.Replace([]*User{b}); err != nil {
		t.Fatal(err)
	}
	if _, ok := us.Lookup("a"); ok {
		t.Error("a still present after Replace")
	}
	if got, ok := us.Lookup("b"); !ok || got != b {
		t.Error("b missing after Replace")
	}
	if a.Name != "a" || !a.CheckPassword([]byte("1")) {
		t.Error("a *User handed out before Replace changed")
	}
}

// Run with -race: lookups and authentications race with Replace.
func TestUsersConcurrentReplace(t *testing.T) {
	a, b := mustUser(t, "a", "1", ""), mustUser(t, "b", "2", "")
	us, err := NewUsers([]*User{a})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 500 {
				if i == 0 {
					_ = us.Replace([][]*User{{a}, {b}, {a, b}}[j%3])
					continue
				}
				if u, ok := us.Lookup("a"); ok && u != a {
					t.Error("Lookup returned a foreign user")
				}
				_, _ = us.Authenticate("b", []byte("2"))
			}
		})
	}
	wg.Wait()
}

// The shipped config's users must be accepted, and the app user's hash
// must verify the documented password.
func TestShippedConfigUsers(t *testing.T) {
	data, err := os.ReadFile("../config/serverless.json")
	if err != nil {
		t.Fatalf("shipped config not readable (moved? this test must follow it): %v", err)
	}
	var f struct {
		Users []struct {
			Name         string   `json:"name"`
			Password     string   `json:"password"`
			PasswordHash string   `json:"password_hash"`
			Buckets      []string `json:"buckets"`
			Privileges   []string `json:"privileges"`
		} `json:"users"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		pw    string
		plain bool
	}{"admin": {"change-me", true}, "app": {"app-secret", false}}
	for _, cu := range f.Users {
		u, err := NewUser(cu.Name, cu.Password, cu.PasswordHash, cu.Buckets, cu.Privileges)
		if err != nil {
			t.Fatalf("shipped user %q: %v", cu.Name, err)
		}
		w, ok := want[cu.Name]
		if !ok {
			t.Fatalf("unexpected shipped user %q", cu.Name)
		}
		delete(want, cu.Name)
		if u.UsesPlainPassword() != w.plain || !u.CheckPassword([]byte(w.pw)) {
			t.Errorf("user %q: plain=%v, password %q does not verify", cu.Name, u.UsesPlainPassword(), w.pw)
		}
	}
	if len(want) != 0 {
		t.Errorf("shipped config lacks users %v", want)
	}
}

func TestParsePlain(t *testing.T) {
	for _, tc := range []struct {
		mech, value, name, password, err string
	}{
		{"PLAIN", "\x00alice\x00pw", "alice", "pw", ""},
		{"PLAIN", "alice\x00alice\x00pw", "alice", "pw", ""},
		{"PLAIN", "\x00alice\x00p\x00w", "alice", "p\x00w", ""},
		{"PLAIN", "admin\x00alice\x00pw", "", "", "PLAIN authorization identity must be empty or the user's own"},
		{"PLAIN", "alice\x00pw", "", "", "malformed PLAIN credentials"},
		{"CRAM-MD5", "\x00alice\x00pw", "", "", "unsupported mechanism: use PLAIN"},
	} {
		name, pw, err := ParsePlain(tc.mech, []byte(tc.value))
		if got := fmt.Sprint(err); (tc.err == "" && err != nil) || (tc.err != "" && got != tc.err) ||
			name != tc.name || string(pw) != tc.password {
			t.Errorf("%s %q: %q, %q, %v; want %q, %q, %q", tc.mech, tc.value, name, pw, err, tc.name, tc.password, tc.err)
		}
	}
}
