#!/usr/bin/env python3
"""make-corpus.py: writes the seed corpora of the fuzz targets
(tests/fuzz/corpus/<target>/).  The files are in the repository; run this
again only to change them:  python3 tests/fuzz/make-corpus.py tests/fuzz/corpus

Handles follow the byte layout documented in include/cuemm.h (little-endian
hosts), sealed with its FNV-1a checksum."""
import os
import struct
import sys


def fnv1a(b):
    x = 2166136261
    for c in b:
        x ^= c
        x = (x * 16777619) & 0xFFFFFFFF
    return x


def handle(kind, pid, offset, size, alloc_size, driver, version=1, magic=b"cuem", reserved=bytes(8)):
    uuid = bytes(range(16))
    h = bytearray(magic + struct.pack("<HHII", version, kind, pid, 0) + struct.pack("<QQQ", offset, size, alloc_size)
                  + uuid + reserved + driver)
    assert len(h) == 128
    h[12:16] = struct.pack("<I", fnv1a(h))
    return bytes(h)


def pieces(sizes, serial=7):
    return struct.pack("<IIQ", len(sizes), 0, serial) + b"".join(struct.pack("<Q", s) for s in sizes) + \
        bytes(8 * (6 - len(sizes)))


def sim_ipc(pid, fd, ino, size):
    # simcuda's legacy IPC handle: magic, pid, fd, device, reserved, inode, size, mapped size
    return (b"SIMCUIPC" + struct.pack("<iiiiQQQ", pid, fd, 0, 0, ino, size, size)).ljust(64, b"\0")


def main(out):
    MiB = 1 << 20
    dev = handle(1, 4242, 4096, 8192, 1 * MiB, sim_ipc(4242, 9, 123456, 1 * MiB))
    pool1 = handle(2, 4242, 256, 4096, 4 * MiB, pieces([4 * MiB]))
    pool3 = handle(2, 4242, 4 * MiB - 512, 4 * MiB + 1024, 12 * MiB, pieces([4 * MiB, 4 * MiB, 4 * MiB]))
    own = handle(1, 1, 0, 64, 64, sim_ipc(1, 3, 1, 64))  # pid 1: surely not the fuzzer's
    bad_sum = bytearray(dev)
    bad_sum[20] ^= 1
    unknown = handle(3, 4242, 0, 64, 64, bytes(64))
    bad_pieces = handle(2, 4242, 0, 64, 8 * MiB, pieces([4 * MiB, 4 * MiB, 0]))
    over = handle(1, 4242, 2 ** 63, 2 ** 63, 2 ** 63, bytes(64))
    handles = {
        "device": dev, "pool-1-chunk": pool1, "pool-3-chunks": pool3, "device-pid1": own,
        "bad-checksum": bytes(bad_sum), "kind-3": unknown, "pool-zero-piece": bad_pieces,
        "offset-overflow": over, "version-2": handle(1, 4242, 0, 64, 64, bytes(64), version=2),
        "bad-magic": handle(1, 4242, 0, 64, 64, bytes(64), magic=b"CUEM"),
        "reserved-set": handle(1, 4242, 0, 64, 64, bytes(64), reserved=b"\1" + bytes(7)),
        "truncated-127": dev[:127], "truncated-64": dev[:64], "long-129": dev + b"\0", "empty": b"",
    }
    write(out, "ipc-handle", handles)

    # ipc-recv: [descriptors, split point] + payload
    recv = {
        "device-no-fd": bytes([0, 0]) + dev, "device-split": bytes([0, 60]) + dev,
        "device-with-fd": bytes([1, 10]) + dev, "pool-1-fd": bytes([1, 0]) + pool1,
        "pool-3-fds": bytes([3, 100]) + pool3, "pool-3-chunks-2-fds": bytes([2, 1]) + pool3,
        "pool-too-many-fds": bytes([20, 5]) + pool1, "truncated": bytes([2, 3]) + dev[:100],
        "bad-checksum-fds": bytes([3, 7]) + bytes(bad_sum), "trailing": bytes([0, 128]) + dev + b"tail",
        "fds-only": bytes([5, 0]), "empty": b"",
    }
    write(out, "ipc-recv", recv)

    # config: [variable index] + value; the order of src/base/config.c's table
    values = {
        0: ["10", "0", "4294967295", "4294967296", "-1", " 5", "12x", "010"],
        1: ["0.2", "1", "1.0", "0", "1.5", "20%", ".5", "0x0.8p0", "1e-3", "nan", "inf", "0.2 "],
        2: ["none", "vmm", "VMM", "cuda", ""],
        3: ["0", "80GiB", "4GiB", "512M", "1073741824", "256TiB", "257T", "1.5G", "4gib", "18446744073709551615K"],
        4: ["32MiB", "2M", "0", "0K", "3MiB", "99999999999999999999", "64Mib"],
        5: ["1GiB", "256M", "0", "1KiB", "1 GiB"],
        6: ["16GiB", "0", "-1", "1TB"],
        7: ["0", "1", "2", "yes", "01"],
    }
    cfg = {}
    for idx, vals in values.items():
        for i, v in enumerate(vals):
            cfg["var%d-%02d" % (idx, i)] = bytes([idx]) + v.encode()
    cfg["garbage"] = bytes([3]) + bytes(range(1, 40))
    write(out, "config", cfg)

    write(out, "ops", ops_seeds())
    write(out, "replay", replay_seeds())


# ops: two configuration bytes, then operations (fuzz-ops.c's op_* read
# their arguments in this order).  Sizes are indices into its table
# (4: 4 KiB, 10: 1 MiB, 12: 8 MiB, 13: 12 MiB, 14: past the reservation);
# streams 0 legacy, 1 per-thread, 2..4 created.
def cfg(reuse=0, keep=0, pending=1, threshold0=False, delay0=False, limit=False, hard=False, mode=0):
    # mode 0: the pool; 2: no pool; 3: managed memory
    return bytes([reuse + 4 * keep, pending | threshold0 << 2 | delay0 << 3 | limit << 4 | hard << 5 | mode << 6])


def alloc_async(size, k, tag=0x11): return bytes([0, size, k, tag])
def alloc(size, tag=0x21): return bytes([3, size, 0, tag])
def free_async(i, how=1): return bytes([4, i, how])  # how % 4 != 0: on the block's own stream
def free(i): return bytes([6, i])
def write_on(i, k, tag=0x31): return bytes([7, i, k, tag])
def run(k, n=0): return bytes([8, k, n])
def sync(k): return bytes([9, k])  # k = 5: the whole context
def check(i): return bytes([10, i])
def control(sub): return bytes([11, sub])  # trim, flush, defer begin, defer end, pool stats, suspend, resume
def suspend(keep=True): return control(5) + bytes([int(keep)])  # cuemm_pool_suspend, CUEMM_SUSPEND_KEEP or not
def resume(): return control(6)
def restream(k): return bytes([12, k - 1])
def bad(how, which): return bytes([13, how, which])
def fault(entry, nth=1, oom=False): return bytes([14, entry, nth - 1, int(oom)])
CLEAR = bytes([15])


def ops_seeds():
    import random
    seeds = {
        "same-stream": cfg() + alloc_async(4, 2) + free_async(0) + alloc_async(4, 2) + check(0) + free_async(0),
        # freed on 2 with its write pending; 3 asks for the same size, then 2's work runs
        "cross-stream-pending": cfg() + alloc_async(10, 2) + free_async(0) + alloc_async(10, 3) + run(2)
        + alloc_async(10, 3) + check(0) + check(1),
        "cross-stream-wait": cfg(reuse=1) + alloc_async(10, 2) + free_async(0) + alloc_async(10, 3) + check(0),
        "internal-full-pool": cfg(reuse=2, keep=1) + alloc_async(13, 2) + alloc_async(13, 3) + free_async(0)
        + alloc_async(13, 4) + sync(5) + check(0) + check(1),
        "record-stream": cfg() + alloc_async(4, 2) + write_on(0, 3) + free_async(0) + alloc_async(4, 2) + check(0),
        "other-stream-free": cfg() + alloc_async(10, 2) + free_async(0, how=4 * 3) + alloc_async(10, 3) + check(0),
        "mixing": cfg(pending=0) + alloc(5) + free_async(0, how=4 * 2) + alloc_async(5, 2) + free(0)
        + alloc_async(14, 1) + write_on(0, 2) + free_async(0),
        "restream": cfg(keep=2) + alloc_async(10, 4) + free_async(0) + restream(4) + alloc_async(10, 4)
        + restream(1) + check(0),
        "bad-pointers": cfg() + alloc_async(5, 2) + bad(0, 0) + bad(4, 0) + bad(8, 0) + free_async(0)
        + bad(1, 0) + bad(5, 0) + bad(2, 7),
        "defer-trim": cfg(pending=2, threshold0=True, delay0=True) + control(2) + alloc(12) + free(0)
        + control(0) + control(3) + control(1) + control(4) + alloc_async(12, 2) + free_async(0) + control(0),
        "limit-hard": cfg(limit=True, hard=True) + alloc_async(13, 2) + alloc(14) + alloc_async(12, 3) + check(0),
        "limit-soft": cfg(limit=True) + alloc_async(13, 2) + alloc_async(13, 3) + check(1) + free_async(1),
        "fault-growth": cfg() + fault(1) + alloc_async(12, 2) + CLEAR + fault(9, 1) + fault(10, 1)
        + alloc_async(12, 2) + CLEAR + alloc_async(12, 2) + control(0),
        "fault-events": cfg() + alloc_async(4, 2) + write_on(0, 3) + fault(3) + free_async(0) + CLEAR
        + alloc_async(4, 2) + free_async(0) + fault(4) + fault(5, oom=True) + alloc_async(4, 3) + alloc_async(4, 2)
        + CLEAR,
        "fault-wait": cfg(reuse=1) + alloc_async(10, 2) + free_async(0) + fault(6) + alloc_async(10, 3) + CLEAR
        + check(0),
        # no pool: the stream calls refused; frees deferred past pending work
        "no-pool": cfg(mode=2, pending=2) + alloc(4) + alloc_async(4, 2) + write_on(0, 2) + free(0) + alloc(4)
        + free_async(0) + control(2) + free(0) + control(1) + control(3) + control(1) + alloc(14) + restream(3)
        + bad(4, 0) + bad(8, 0) + bad(0, 0) + control(4) + fault(8) + fault(11) + free(0) + CLEAR + control(1),
        "managed": cfg(mode=3, pending=1) + alloc_async(10, 2) + write_on(0, 3) + free_async(0) + alloc(5)
        + write_on(0, 1) + check(0) + control(0) + control(4) + restream(2) + bad(8, 0) + bad(4, 0)
        + fault(12) + alloc(12) + CLEAR + free(0),
    }
    # suspend and resume: refusals while suspended, contents kept or dropped,
    # a failed copy, unmap, cuMemCreate and copy back, each retried
    seeds["suspend"] = (cfg() + alloc_async(10, 2) + alloc(12) + write_on(0, 3) + alloc_async(4, 3) + free_async(2)
        + suspend() + alloc_async(4, 2) + alloc(5) + alloc(14) + control(4) + suspend() + control(0) + resume()
        + check(0) + check(1) + suspend(keep=False) + free(1) + control(4) + resume() + write_on(0, 2) + check(0)
        + fault(13) + suspend() + CLEAR + check(0) + fault(9) + suspend() + CLEAR + suspend() + fault(0) + resume()
        + CLEAR + resume() + check(0) + suspend() + fault(14) + resume() + CLEAR + resume() + check(0)
        + fault(10, 1) + suspend() + CLEAR + resume() + check(0) + alloc_async(4, 2) + write_on(1, 2) + check(1)
        + suspend() + resume() + check(1) + resume())
    for n, size in enumerate([300, 1200, 3000, 4000]):
        r = random.Random(n)
        seeds["random-%d" % n] = bytes(r.randrange(256) for _ in range(size))
    return seeds


def replay_seeds():
    # cuemm-replay's logs: the repository's own, then broken and odd ones.
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    seeds = {}
    for d, name in [("bench/traces", "two-streams.csv"), ("bench/traces", "rmm-bare-hex.csv"),
                    ("tests/fixtures", "replay-seq.csv"), ("tests/fixtures", "replay-managers.csv"),
                    ("tests/fixtures", "replay-streams.csv")]:
        with open(os.path.join(top, d, name), "rb") as f:
            seeds[name] = f.read()
    rmm = b"Thread,Time,Action,Pointer,Size,Stream\n"
    cuemm = b"Thread,Time,Action,Pointer,Size,Stream,Seq,Manager,Call,Held,Events\n"
    seeds.update({
        "bad-esc-header.csv": b"Thread,Time,Action,Pointer,Size,\x1b[2J\x1b[31mStream\n1,0,allocate,0x1,1\n",
        "bad-pointer.csv": rmm + b"1,0,allocate,0x1000,64,0x0\n1,0,free,0xZZ\x07\xff,64,0x0\n",
        "bad-short.csv": rmm + b"1,0,allocate,0x1000,64\n",
        "bad-nul.csv": rmm + b"1,0,allocate,0x1000\x00,64,0x0\n",
        "bad-twice.csv": b"Thread,Time,Action,Pointer,Size,Stream,Seq,Seq\n",
        # The target's first find: a header with Seq and no rows once passed
        # qsort a NULL array.
        "seq-header-only.csv": b"Thread,Time,Action,Pointer,Size,Stream,Seq,SeqJ",
        "bad-overflow.csv": rmm + b"1,0,allocate,0x1000,18446744073709551615,0x0\n1,0,allocate,0x2000,1,0x0\n",
        "bad-streams.csv": rmm + b"".join(b"1,0,allocate,0x%x,64,0x%x\n" % (0x1000 * (i + 1), i + 3) for i in range(257)),
        "bad-manager.csv": cuemm + b"1,0,allocate,0x1000,64,0x0,1,,cuemm_alloc,0,\n",
        "empty.csv": b"",
        "header-only.csv": b"\xef\xbb\xbf" + rmm,
        "crlf-odd.csv": (rmm + b"1,0,allocate,0xa000,4096,0x0\n1,0,resize,0xa000,8192,0x0\n"
                         b"1,0,free,0xb000,4096,0x0\n1,0,allocate,0xa000,512,0x0\n1,0,allocate failure,0x0,1,0x0\n"
                         b"1,0,free,0xa000,512,0x1\n1,0,allocate,0x0,0,0x2\n").replace(b"\n", b"\r\n"),
        "actions.csv": rmm + b"".join(b"1,0,%s,0x1000,64,0x0\n" % (b"act%d-%s" % (i, b"y" * 40)) for i in range(10)),
        "managers.csv": cuemm + b"1,0,allocate,0x1000,64,0x0,3,2,a,100,\n1,0,allocate,0x1000,64,0x0,1,4294967295,a,,\n"
                        b"2,0,free,0x1000,32,0x0,2,2,f,64,\n2,0,free,0x1000,64,0x0,2,4294967295,f,7,\n",
        # The models' shapes: holes that first and best fit fill differently,
        # a free in the middle of the space, and sizes past their span.
        "models-split.csv": rmm + b"".join(b"1,0,%s,0x%x,%d,0x0\n" % (a, p, n << 20) for a, p, n in [
            (b"allocate", 0x1000000, 4), (b"allocate", 0x2000000, 6), (b"allocate", 0x3000000, 2),
            (b"allocate", 0x4000000, 4), (b"free", 0x2000000, 6), (b"free", 0x4000000, 4),
            (b"allocate", 0x5000000, 4), (b"allocate", 0x6000000, 6), (b"allocate", 0x7000000, 1),
            (b"free", 0x3000000, 2), (b"allocate", 0x8000000, 3)]),
        "models-huge.csv": rmm + b"1,0,allocate,0x1000,17592186044416,0x0\n1,0,allocate,0x2000,17592186044417,0x0\n"
                           b"1,0,free,0x1000,17592186044416,0x0\n1,0,allocate,0x3000,300,0x0\n",
    })
    return seeds


def write(out, target, files):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus"))
