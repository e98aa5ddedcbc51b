#!/usr/bin/env python3
"""Process memory against the network budget (README, Network memory).

Usage: bench/memload.py PORT METRICS_PORT SECONDS KVD_PID

Against a running kvd (binary protocol, an anonymous bucket), every ~3 s it
opens 60 connections that each send a 900 KB SET and 40 GETs of it without
reading the replies, and 60 that stop three quarters through a 900 KB SET;
each closes after 3 s. It prints kvd's RSS (/proc), Go heap (/metrics) and
the bytes the network budget holds (kvd_buffer_bytes{state="held"}) during
the load, then idle, then after two forced collections (/debug/pprof/heap?gc=1).
The README's figures: kvd with max_buffer_bytes 128 MiB, item_cache_bytes
64 MiB, block_cache_bytes 16 MiB, wal_sync false, 60 s, with and without
GOMEMLIMIT=400MiB in kvd's environment.
"""
import re, socket, struct, sys, threading, time, urllib.request

ADDR=('127.0.0.1', int(sys.argv[1])); MET='http://127.0.0.1:%s' % sys.argv[2]; DUR=float(sys.argv[3]); PID=int(sys.argv[4])
def req(op, key, value=b'', extras=b'', opaque=0):
    key = key.encode() if isinstance(key,str) else key
    return struct.pack('>BBHBBHIIQ',0x80,op,len(key),len(extras),0,0,len(extras)+len(key)+len(value),opaque,0)+extras+key+value
VAL=b'v'*900_000
def holder(i):
    s=socket.create_connection(ADDR); s.settimeout(5)
    k='big%d'%(i%50)
    try:
        s.sendall(req(0x01,k,VAL,extras=struct.pack('>II',0,0)))
        s.sendall(b''.join(req(0x00,k) for _ in range(40)))
        time.sleep(3)
    except Exception as e: pass
    s.close()
def stalled(i):
    s=socket.create_connection(ADDR)
    try:
        s.sendall(req(0x01,'st%d'%i,VAL,extras=struct.pack('>II',0,0))[:700_000]); time.sleep(3)
    except Exception: pass
    s.close()
def metrics():
    t=urllib.request.urlopen(MET+'/metrics').read().decode()
    g=lambda n: float(re.search(r'^'+n+r'(?:\{[^}]*\})? (\S+)$', t, re.M).group(1)) if re.search(r'^'+n+r'(?:\{[^}]*\})? (\S+)$', t, re.M) else -1
    held=re.search(r'^kvd_buffer_bytes\{state="held"\} (\S+)$', t, re.M)
    rss=int(open('/proc/%d/status'%PID).read().split('VmRSS:')[1].split()[0])
    return dict(rss_mb=rss//1024, heap_inuse_mb=int(g('go_memstats_heap_inuse_bytes')/2**20), heap_alloc_mb=int(g('go_memstats_heap_alloc_bytes')/2**20), held_mb=round(float(held.group(1))/2**20,1) if held else -1, conns=g('kvd_connections'))
end=time.time()+DUR; n=0; peak={}
while time.time()<end:
    ts=[threading.Thread(target=holder,args=(n+j,)) for j in range(60)]+[threading.Thread(target=stalled,args=(n+j,)) for j in range(60)]
    for t in ts: t.start()
    time.sleep(1.5); m=metrics(); print('load', m, flush=True)
    for k,v in m.items(): peak[k]=max(peak.get(k,0),v)
    for t in ts: t.join()
    n+=60
print('peak', peak)
for i in range(3):
    time.sleep(5); print('idle', metrics(), flush=True)
for i in range(2):
    urllib.request.urlopen(MET+'/debug/pprof/heap?gc=1').read()
time.sleep(2); print('after 2 forced GCs', metrics())
time.sleep(30); print('30 s later', metrics())
