package engine

import (
	"errors"
	"fmt"
	"testing"
)

// TestCreateBuckets creates more buckets than one batch holds: every name
// is checked first (a taken or repeated name creates nothing), IDs are
// distinct, and a reopen finds every bucket with its settings and the ID
// counter past them.
func TestCreateBuckets(t *testing.T) {
	db := openTest(t, nil)
	if _, err := db.CreateBucket("taken", []byte("t")); err != nil {
		t.Fatal(err)
	}
	var list []NewBucket
	for i := range createChunk + 100 {
		list = append(list, NewBucket{Name: fmt.Sprintf("b%05d", i), Settings: []byte(fmt.Sprint(i))})
	}
	for _, bad := range [][]NewBucket{
		append(list[:3:3], NewBucket{Name: "taken"}),
		append(list[:3:3], list[1]),
		append(list[:3:3], NewBucket{Name: "bad name"}),
	} {
		if _, err := db.CreateBuckets(bad); err == nil {
			t.Fatalf("CreateBuckets(%v) succeeded", bad)
		}
		if _, err := db.Bucket(list[0].Name); !errors.Is(err, ErrBucketNotFound) {
			t.Fatalf("a refused list created %s: %v", list[0].Name, err)
		}
	}
	made, err := db.CreateBuckets(list)
	if err != nil || len(made) != len(list) {
		t.Fatalf("CreateBuckets: %d made, %v", len(made), err)
	}
	ids := map[uint32]bool{}
	for _, b := range made {
		if ids[b.id] {
			t.Fatalf("ID %d handed out twice", b.id)
		}
		ids[b.id] = true
	}
	dir := db.opts.Dir
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, func(o *Options) { o.Dir = dir })
	infos := db.Buckets()
	if len(infos) != len(list)+1 {
		t.Fatalf("%d buckets after reopen, want %d", len(infos), len(list)+1)
	}
	for i, info := range infos[:len(list)] {
		if info.Name != list[i].Name || string(info.Settings) != string(list[i].Settings) {
			t.Fatalf("bucket %d: %s %q, want %s %q", i, info.Name, info.Settings, list[i].Name, list[i].Settings)
		}
	}
	b, err := db.CreateBucket("later", nil)
	if err != nil || ids[b.id] {
		t.Fatalf("create after reopen: %v, id %d reused: %v", err, b.id, ids[b.id])
	}
}
