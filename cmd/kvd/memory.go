package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// meminfoPath is where Linux reports physical memory.
const meminfoPath = "/proc/meminfo"

// defaultInflightBytes is max_inflight_bytes when the config file leaves it
// out: a quarter of physical memory (MemTotal of /proc/meminfo), or 0 (no
// limit) where that cannot be read. The file's explicit 0 also means no limit.
func defaultInflightBytes() int64 {
	data, err := os.ReadFile(meminfoPath)
	if err != nil {
		return 0
	}
	return memTotal(data) / 4
}

// memTotal parses the "MemTotal: N kB" line of /proc/meminfo into bytes;
// 0 if there is none.
func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 2 || string(fields[0]) != "MemTotal:" {
			continue
		}
		n, err := strconv.ParseInt(string(fields[1]), 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		if len(fields) >= 3 && string(fields[2]) == "kB" {
			n *= 1024
		}
		return n
	}
	return 0
}

// inflightBytes is the node's max_inflight_bytes: the file's value (0 = no
// limit), or def when the file leaves it out.
func inflightBytes(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
