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

    # config: [variable index] + value; the order of src/config.c's table
    values = {
        0: ["10", "0", "4294967295", "4294967296", "-1", " 5", "12x", "010"],
        1: ["0.2", "1", "1.0", "0", "1.5", "20%", ".5", "0x0.8p0", "1e-3", "nan", "inf", "0.2 "],
        2: ["none", "vmm", "VMM", "cuda", ""],
        3: ["0", "80GiB", "4GiB", "512M", "1073741824", "256TiB", "257T", "1.5G", "4gib", "18446744073709551615K"],
        4: ["32MiB", "2M", "0", "0K", "3MiB", "99999999999999999999"],
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


def write(out, target, files):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus"))
