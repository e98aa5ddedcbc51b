"""pymemcache (Debian's python3-pymemcache) through every call its base
Client offers, against the server at argv[1] (host:port). Run by
tests/text_clients_test.go with /usr/bin/python3. Prints "N passed, 0
failed" and exits 0 when every check holds; the first failed check raises."""
import sys

from pymemcache.client.base import Client
from pymemcache import exceptions

host, port = sys.argv[1].rsplit(":", 1)
checks = 0


def check(what, got, want):
    global checks
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))
    checks += 1


def raises(what, exc, fn, *args, **kw):
    global checks
    try:
        fn(*args, **kw)
    except exc:
        checks += 1
        return
    raise AssertionError("%s: no %s" % (what, exc.__name__))


c = Client((host, int(port)), connect_timeout=5, timeout=5)
check("flush_all", c.flush_all(noreply=False), True)
check("version", c.version(), b"1.6.18 kvd-0.1.0")

# Storage, with and without noreply.
check("set", c.set("a", b"alpha", noreply=False), True)
check("set noreply", c.set("a2", b"alpha2", noreply=True), True)
check("get", c.get("a"), b"alpha")
check("get noreply-stored", c.get("a2"), b"alpha2")
check("get missing", c.get("missing"), None)
check("get default", c.get("missing", default=b"d"), b"d")
check("add existing", c.add("a", b"x", noreply=False), False)
check("add new", c.add("b", b"beta", noreply=False), True)
check("add noreply", c.add("b2", b"beta2", noreply=True), True)
check("replace missing", c.replace("zz", b"x", noreply=False), False)
check("replace", c.replace("b", b"BETA", noreply=False), True)
check("replace noreply", c.replace("b2", b"BETA2", noreply=True), True)
check("append", c.append("b", b"++", noreply=False), True)
check("prepend", c.prepend("b", b"--", noreply=False), True)
check("append noreply", c.append("b2", b"!", noreply=True), True)
check("prepend noreply", c.prepend("b2", b"!", noreply=True), True)
check("append missing", c.append("zz", b"x", noreply=False), False)
check("after append/prepend", c.get("b"), b"--BETA++")
check("after noreply append/prepend", c.get("b2"), b"!BETA2!")

# Flags and expiry.
check("set flags", c.set("f", b"v", expire=100, flags=42, noreply=False), True)
check("get flagged", c.get("f"), b"v")
check("set expired", c.set("e", b"v", expire=-1, noreply=False), True)
check("get expired", c.get("e"), None)

# Multi-key reads and writes.
check("set_many", c.set_many({"m1": b"1", "m2": b"2", "m3": b"3"}, noreply=False), [])
check("set_multi", c.set_multi({"m4": b"4"}, noreply=False), [])
check("get_many", c.get_many(["m1", "m2", "m3", "m4", "nothing"]),
      {"m1": b"1", "m2": b"2", "m3": b"3", "m4": b"4"})
check("get_multi", c.get_multi(["m1", "nothing"]), {"m1": b"1"})
many = c.gets_many(["m1", "m2", "nothing"])
check("gets_many keys", sorted(many), ["m1", "m2"])
check("gets_many values", many["m1"][0], b"1")

# CAS.
value, cas = c.gets("a")
check("gets", value, b"alpha")
check("cas", c.cas("a", b"swapped", cas, noreply=False), True)
check("cas stale", c.cas("a", b"again", cas, noreply=False), False)
check("cas missing", c.cas("nothing", b"x", cas, noreply=False), None)
check("gets missing", c.gets("nothing"), (None, None))
check("after cas", c.get("a"), b"swapped")

# Arithmetic.
check("set n", c.set("n", b"10", noreply=False), True)
check("incr", c.incr("n", 5, noreply=False), 15)
check("decr", c.decr("n", 100, noreply=False), 0)
check("incr missing", c.incr("nothing", 1, noreply=False), None)
check("decr missing", c.decr("nothing", 1, noreply=False), None)
check("incr noreply", c.incr("n", 7, noreply=True), None)
check("after incr noreply", c.get("n"), b"7")
raises("incr non-numeric", exceptions.MemcacheClientError, c.incr, "a", 1, noreply=False)

# Touch and delete.
check("touch", c.touch("a", 100, noreply=False), True)
check("touch missing", c.touch("nothing", 100, noreply=False), False)
check("touch noreply", c.touch("a", 100, noreply=True), True)
check("delete", c.delete("a", noreply=False), True)
check("delete missing", c.delete("a", noreply=False), False)
check("delete noreply", c.delete("b", noreply=True), True)
check("after delete noreply", c.get("b"), None)
check("delete_many", c.delete_many(["m1", "m2", "nothing"], noreply=False), True)
check("delete_multi", c.delete_multi(["m3"], noreply=False), True)
check("after delete_many", c.get_many(["m1", "m2", "m3"]), {})

# Stats: memcached's general group, then kvd's groups.
stats = c.stats()
check("stats pid", stats[b"pid"] > 0, True)
check("stats bucket", stats[b"bucket"], b"default")
check("stats text_commands counted", stats[b"text_commands"] > 0, True)
details = c.stats("bucket_details", "default")
check("stats bucket_details", b'"name":"default"' in details[b"default"], True)
check("stats throttle", b"capacity" in c.stats("throttle"), True)
check("stats delete_hits", stats[b"delete_hits"] > 0, True)
check("stats rusage_user", stats[b"rusage_user"] >= 0, True)
# memcached's other groups, which monitoring agents ask for at every scrape.
settings = c.stats("settings")
check("stats settings maxconns", settings[b"maxconns"] > 0, True)
check("stats settings item_size_max", settings[b"item_size_max"], 1 << 20)
check("stats settings cas_enabled", settings[b"cas_enabled"], b"yes")
check("stats items", c.stats("items"), {})
check("stats slabs", c.stats("slabs"), {b"active_slabs": 0, b"total_malloced": 0})

# Values near the limit, and a refused one that leaves the connection usable.
check("set 1 MiB", c.set("big", b"x" * (1 << 20), noreply=False), True)
check("get 1 MiB", len(c.get("big")), 1 << 20)
raises("set over max_item_size", exceptions.MemcacheServerError, c.set, "huge", b"x" * (2 << 20), noreply=False)
check("usable after a refusal", c.set("after", b"ok", noreply=False), True)
check("get after a refusal", c.get("after"), b"ok")

# Commands kvd does not serve (docs/text-protocol.md): the client's error.
raises("cache_memlimit", exceptions.MemcacheUnknownCommandError, c.cache_memlimit, 64)

check("flush_all noreply", c.flush_all(noreply=True), True)
check("after flush_all", c.get("after"), None)
c.quit()
c.close()
print("%d passed, 0 failed" % checks)
