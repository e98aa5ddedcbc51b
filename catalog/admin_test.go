package catalog

import (
	"errors"
	"strings"
	"testing"

	"kvd/engine"
	"kvd/tenant"
)

// TestPrepare: a bad name or body is refused before anything runs, a
// missing bucket is named, and the change runs only when applied.
func TestPrepare(t *testing.T) {
	f := open(t, t.TempDir(), defaults)
	for _, tc := range []struct {
		cmd        Admin
		name, body string
		want       error
	}{
		{AdminCreate, "bad name!", "", tenant.ErrInvalidBucketName},
		{AdminCreate, "app", `{"reserved":"lots"}`, tenant.ErrInvalidSettings},
		{AdminCreate, "app", `{"reserved":1` + strings.Repeat(" ", tenant.MaxThrottleDocLen) + `}`, tenant.ErrInvalidSettings}, // as 0x2a
		{AdminSetBucket, "nope", `{"reserved":"lots"}`, tenant.ErrInvalidSettings},                                             // the body first
		{AdminSetBucket, "nope", `{"reserved":5}`, engine.ErrBucketNotFound},
		{AdminSetNode, "", `{"capacity":-1}`, tenant.ErrInvalidSettings},
	} {
		if _, err := f.cat.Prepare(tc.cmd, tc.name, []byte(tc.body)); !errors.Is(err, tc.want) {
			t.Errorf("Prepare(%d, %q, %s) = %v, want %v", tc.cmd, tc.name, tc.body, err, tc.want)
		}
	}
	create, err := f.cat.Prepare(AdminCreate, "app", []byte(`{"reserved":10,"hard_limit":20}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.cat.Get("app"); ok {
		t.Fatal("the bucket exists before the change is applied")
	}
	if err := create("test"); err != nil {
		t.Fatal(err)
	}
	set, err := f.cat.Prepare(AdminSetBucket, "app", []byte(`{"reserved":15,"hard_limit":20}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := set("test"); err != nil {
		t.Fatal(err)
	}
	if b, _ := f.cat.Get("app"); b.Settings().Reserved != 15 {
		t.Fatalf("reserved %d after SetBucket, want 15", b.Settings().Reserved)
	}
	del, _ := f.cat.Prepare(AdminDelete, "app", nil)
	if err := del("test"); err != nil {
		t.Fatal(err)
	}
	if err := del("test"); !errors.Is(err, engine.ErrBucketNotFound) || err.Error() != "engine: bucket not found: app" {
		t.Fatalf("second delete: %v, want the bucket named", err)
	}
}
