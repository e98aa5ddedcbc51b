package tests

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// TestTextGomemcache drives kvd with github.com/bradfitz/gomemcache, Go's
// usual memcached client (text protocol), through every call it offers,
// unchanged: only the address is kvd's.
func TestTextGomemcache(t *testing.T) {
	k := startKVD(t, testConfig)
	mc := memcache.New(k.Addr)
	mc.Timeout = 5 * time.Second
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	want := func(what string, err, target error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Fatalf("%s: got %v, want %v", what, err, target)
		}
	}
	must("Ping", mc.Ping())
	must("FlushAll", mc.FlushAll())
	must("Set", mc.Set(&memcache.Item{Key: "a", Value: []byte("alpha"), Flags: 7}))
	it, err := mc.Get("a")
	must("Get", err)
	if string(it.Value) != "alpha" || it.Flags != 7 {
		t.Fatalf("Get a: %q flags %d", it.Value, it.Flags)
	}
	_, err = mc.Get("missing")
	want("Get missing", err, memcache.ErrCacheMiss)
	want("Add existing", mc.Add(&memcache.Item{Key: "a", Value: []byte("x")}), memcache.ErrNotStored)
	must("Add new", mc.Add(&memcache.Item{Key: "b", Value: []byte("beta")}))
	want("Replace missing", mc.Replace(&memcache.Item{Key: "zz", Value: []byte("x")}), memcache.ErrNotStored)
	must("Replace", mc.Replace(&memcache.Item{Key: "b", Value: []byte("BETA")}))
	must("Append", mc.Append(&memcache.Item{Key: "b", Value: []byte("++")}))
	must("Prepend", mc.Prepend(&memcache.Item{Key: "b", Value: []byte("--")}))
	want("Append missing", mc.Append(&memcache.Item{Key: "zz", Value: []byte("x")}), memcache.ErrNotStored)
	it, err = mc.Get("b")
	must("Get b", err)
	if string(it.Value) != "--BETA++" {
		t.Fatalf("after append/prepend: %q", it.Value)
	}
	// CompareAndSwap: Get fetched with gets; a second swap with the old CAS fails.
	it.Value = []byte("swapped")
	must("CompareAndSwap", mc.CompareAndSwap(it))
	it.Value = []byte("again")
	want("CompareAndSwap stale", mc.CompareAndSwap(it), memcache.ErrCASConflict)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "multi" + strconv.Itoa(i)
		if i%2 == 0 {
			must("Set multi", mc.Set(&memcache.Item{Key: keys[i], Value: []byte(keys[i])}))
		}
	}
	got, err := mc.GetMulti(keys)
	must("GetMulti", err)
	if len(got) != 20 || string(got["multi4"].Value) != "multi4" {
		t.Fatalf("GetMulti: %d items", len(got))
	}
	must("Set n", mc.Set(&memcache.Item{Key: "n", Value: []byte("10")}))
	if v, err := mc.Increment("n", 5); err != nil || v != 15 {
		t.Fatalf("Increment: %d %v", v, err)
	}
	if v, err := mc.Decrement("n", 100); err != nil || v != 0 {
		t.Fatalf("Decrement: %d %v", v, err)
	}
	_, err = mc.Increment("nothing", 1)
	want("Increment missing", err, memcache.ErrCacheMiss)
	must("Touch", mc.Touch("a", 100))
	want("Touch missing", mc.Touch("nothing", 100), memcache.ErrCacheMiss)
	it, err = mc.GetAndTouch("a", 200)
	must("GetAndTouch", err)
	if string(it.Value) != "alpha" {
		t.Fatalf("GetAndTouch: %q", it.Value)
	}
	_, err = mc.GetAndTouch("nothing", 1)
	want("GetAndTouch missing", err, memcache.ErrCacheMiss)
	must("Set expiring", mc.Set(&memcache.Item{Key: "e", Value: []byte("x"), Expiration: -1}))
	_, err = mc.Get("e")
	want("Get of an item set with a negative expiration", err, memcache.ErrCacheMiss)
	must("Delete", mc.Delete("a"))
	want("Delete missing", mc.Delete("a"), memcache.ErrCacheMiss)
	big := make([]byte, 2<<20)
	if err := mc.Set(&memcache.Item{Key: "big", Value: big}); err == nil {
		t.Fatal("Set of 2 MiB (over max_item_size): no error")
	}
	must("Set after a refused one", mc.Set(&memcache.Item{Key: "after", Value: []byte("ok")}))
	must("DeleteAll", mc.DeleteAll())
	_, err = mc.Get("b")
	want("Get after DeleteAll", err, memcache.ErrCacheMiss)
	must("Close", mc.Close())
}
