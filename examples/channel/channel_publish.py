#!/usr/bin/env python3
"""Publish usage messages to tally-openstack-collector's local message channel.

A complete client of the channel's protocol (docs/channel.md, "The protocol")
with nothing but the standard library: it connects, publishes one message per
line of its input, shuts down its writing side and reads the daemon's answers
until every message is answered. It exits 0 when every message was committed,
1 when one was not (each is reported on standard error), 2 on an error.

    channel_publish.py --socket /run/tally-openstack-collector/channel.sock \\
        --tag usage.license --type JSON < messages.jsonl

It does not reconnect or resend: a program that needs that should use the
Python client package (examples/channel/python) or the Go client
(runtime/input/channel/client).
"""

import argparse
import os
import socket
import struct
import sys
import time

VERSION = 1
HELLO, WELCOME, PUBLISH, ACK, ERROR = 1, 2, 3, 4, 9
TYPES = {"STRING": 1, "JSON": 2}
STATUSES = {0: "committed", 1: "dead_lettered", 2: "skipped", 3: "refused"}


def frame(ftype, payload):
    return struct.pack(">IBB", len(payload) + 2, VERSION, ftype) + payload


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("the daemon closed the connection")
        buf += chunk
    return buf


def read_frame(sock):
    (length,) = struct.unpack(">I", read_exact(sock, 4))
    body = read_exact(sock, length)
    version, ftype = body[0], body[1]
    if version != VERSION:
        raise ValueError("frame of protocol version %d" % version)
    return ftype, body[2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", default=os.environ.get("TALLY_OSC_CHANNEL_SOCKET"))
    ap.add_argument("--tag", required=True)
    ap.add_argument("--type", default="JSON", choices=sorted(TYPES))
    ap.add_argument("--perm", default="0440")
    args = ap.parse_args()
    if not args.socket:
        ap.error("--socket or TALLY_OSC_CHANNEL_SOCKET is required")
    perm = int(args.perm, 8)
    tag = args.tag.encode()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    name = b"channel_publish.py"
    sock.sendall(frame(HELLO, struct.pack(">BH", 1, len(name)) + name))
    ftype, payload = read_frame(sock)
    if ftype == ERROR:
        (n,) = struct.unpack(">H", payload[:2])
        sys.exit("refused: " + payload[2:2 + n].decode(errors="replace"))
    if ftype != WELCOME:
        sys.exit("unexpected frame %d" % ftype)
    max_data, uid, gid = struct.unpack(">III", payload[:12])

    seq = 0
    out = []
    for line in sys.stdin.buffer:
        data = line.rstrip(b"\r\n")
        if not data:
            continue
        if len(data) > max_data:
            sys.exit("line of %d bytes over the daemon's bound %d" % (len(data), max_data))
        seq += 1
        out.append(frame(PUBLISH, struct.pack(">QQIIIBH", seq, time.time_ns(), uid, gid, perm,
                                              TYPES[args.type], len(tag)) + tag
                         + struct.pack(">I", len(data)) + data))
    sock.sendall(b"".join(out))
    sock.shutdown(socket.SHUT_WR)

    answered, failed = 0, 0
    while answered < seq:
        ftype, payload = read_frame(sock)
        if ftype == ERROR:
            (n,) = struct.unpack(">H", payload[:2])
            sys.exit("daemon error: " + payload[2:2 + n].decode(errors="replace"))
        if ftype != ACK:
            continue
        (count,) = struct.unpack(">I", payload[:4])
        at = 4
        for _ in range(count):
            s, status, rlen = struct.unpack(">QBB", payload[at:at + 10])
            reason = payload[at + 10:at + 10 + rlen].decode(errors="replace")
            at += 10 + rlen
            answered += 1
            if status != 0:
                failed += 1
                print("message %d: %s %s" % (s, STATUSES.get(status, status), reason), file=sys.stderr)
    print("%d published, %d not committed" % (seq, failed), file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
