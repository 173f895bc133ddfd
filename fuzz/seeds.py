#!/usr/bin/env python3
"""Writes the committed seed corpus, fuzz/corpus/<target>/<name>: a few
small inputs per target, each meaning something (named below). Run from
anywhere; rewrites the files it owns and leaves others alone."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "011100000000000000000000000000ffff7f4054dc0000000000000000000000000000000000000000010000"
TOKEN_V4 = "010000000000000000000000000000ffff7f0102030000000000000000000000000000000000000000000000"


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# token_decode: accepted tokens, a case variant, near misses.
put("token_decode", "get-token", TOKEN)
put("token_decode", "v4-token", TOKEN_V4)
put("token_decode", "upper-case", TOKEN.upper())
put("token_decode", "one-short", TOKEN[:-1])
put("token_decode", "non-hex", TOKEN[:40] + "zz" + TOKEN[42:])

# reply_parse: every form of docs/protocol.md section 2, and near misses.
for name, text in [
    ("ok", "ok"), ("err", "err"), ("200", "200"), ("206-crlf", "206\r\n"),
    ("501", "501"), ("200-token", "200:" + TOKEN),
    ("409-bind", "409:" + TOKEN + ":00a1b2"), ("409-nul", "409:" + TOKEN + ":000001\0\0"),
    ("600", "600"), ("extra-colon", "200:" + TOKEN + ":"),
]:
    put("reply_parse", name, text)


# roce_datagram: RoCE packets without ICRC (the target seals a copy).
def bth(opcode, psn, qpn=0x11, ack=True, pad=0):
    return struct.pack(">BBHB", opcode, pad << 4, 0xFFFF, 0) + (qpn).to_bytes(3, "big") + \
        bytes([0x80 if ack else 0]) + psn.to_bytes(3, "big")


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


put("roce_datagram", "write-only", bth(0x0A, 0) + reth(0x1000, 1, 8) + b"12345678" + b"\0" * 4)
put("roce_datagram", "read-request", bth(0x0C, 0) + reth(0x1000, 1, 4096) + b"\0" * 4)
put("roce_datagram", "send-only", bth(0x04, 0, pad=1) + b"abc\0" + b"\0" * 4)
put("roce_datagram", "ack", bth(0x11, 0) + struct.pack(">I", 0x1F000001) + b"\0" * 4)
put("roce_datagram", "nak-sequence", bth(0x11, 5) + struct.pack(">I", 0x60000001) + b"\0" * 4)


# roce_stateful: step sequences (see the target's `step` for the format).
def u16(v):
    return struct.pack("<H", v)


def write(opsel, psn_d, key_sel, off, dma_len, length, seed=1, flags=0, extra=b""):
    return bytes([0, opsel, psn_d & 0xFF, key_sel]) + u16(off & 0xFFFF) + extra + u16(dma_len) + \
        u16(length) + bytes([seed, flags])


def read_req(psn_d, key_sel, off, dma_len, flags=0):
    return bytes([1, psn_d & 0xFF, key_sel]) + u16(off & 0xFFFF) + u16(dma_len) + bytes([flags])


def send(opsel, psn_d, length, seed=1, flags=0):
    return bytes([2, opsel, psn_d & 0xFF]) + u16(length) + bytes([seed, flags])


DRAIN = bytes([5])


def later(exp):
    return bytes([4, exp])


def replay(i):
    return bytes([3, i])


def post_read(length, rkey=7):
    return bytes([7]) + u16(length - 1) + struct.pack("<I", rkey)


def response(opsel, psn_d, length, syndrome=0, msn=1, seed=3, flags=0):
    return bytes([8, opsel, psn_d & 0xFF]) + u16(length) + bytes([seed, flags, syndrome, msn])


put("roce_stateful", "write-in-bounds", write(0, 0, 0, 0, 64, 64) + DRAIN)
put("roce_stateful", "write-three-packets",
    write(1, 0, 0, 0, 3000, 1024) + write(2, 0, 0, 0, 0, 1024) + write(3, 0, 0, 0, 0, 952) + DRAIN)
put("roce_stateful", "write-past-the-end", write(0, 0, 0, 4000, 200, 200) + DRAIN)
put("roce_stateful", "write-before-the-start", write(0, 0, 0, -16, 32, 32) + DRAIN)
put("roce_stateful", "write-read-only-key", write(0, 0, 1, 0, 16, 16) + DRAIN)
put("roce_stateful", "write-forged-key", write(0, 0, 3, 0, 16, 16, extra=struct.pack("<I", 0xDEADBEEF)) + DRAIN)
put("roce_stateful", "write-imm-consumes-receive", write(4, 0, 0, 128, 32, 32) + DRAIN)
put("roce_stateful", "send-two-packets", send(1, 0, 1024) + send(3, 0, 100) + DRAIN)
put("roce_stateful", "send-too-long", send(1, 0, 1024) + send(2, 0, 1024) + send(3, 0, 4) + DRAIN)
put("roce_stateful", "read-two-pages", read_req(0, 1, 0, 2048) + DRAIN + later(20) + DRAIN)
put("roce_stateful", "read-local-only-key", read_req(0, 2, 0, 64) + DRAIN)
put("roce_stateful", "duplicate-and-reorder",
    write(0, 0, 0, 0, 8, 8) + write(0, 0, 0, 8, 8, 8, seed=9) + replay(1) + replay(0) + DRAIN)
put("roce_stateful", "psn-ahead-then-gap", write(0, 3, 0, 0, 8, 8) + write(0, 0, 0, 0, 8, 8) + DRAIN)
put("roce_stateful", "corrupt-and-misaddressed",
    write(0, 0, 0, 0, 8, 8, flags=8) + write(0, 0, 0, 0, 8, 8, flags=2) + DRAIN)
put("roce_stateful", "own-read-answered",
    post_read(2048) + DRAIN + response(1, 0, 1024, syndrome=0) + response(3, 0, 1024, syndrome=0) + DRAIN)
put("roce_stateful", "own-read-short-answer", post_read(2048) + DRAIN + response(0, 0, 100) + DRAIN)
put("roce_stateful", "own-read-times-out",
    post_read(100) + DRAIN + later(25) + DRAIN + later(30) + DRAIN + later(33) + DRAIN + later(34) + DRAIN)
put("roce_stateful", "own-read-nak", post_read(64) + DRAIN + response(4, 0, 0, syndrome=3) + DRAIN)
