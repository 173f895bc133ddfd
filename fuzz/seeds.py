#!/usr/bin/env python3
"""Writes the committed seed corpus, fuzz/corpus/<target>/<name>: a few
small inputs per target, each meaning something (named below). Run from
anywhere; rewrites the files it owns and leaves others alone."""
import base64
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
put("token_decode", "two-headers", TOKEN + "\n" + TOKEN)

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


# transfer_sequence: whole calls (see the target's `run` and `S3`). A round
# is the send byte (0x10: the server's RDMA during the request, then its
# action), the reply's bytes, then the after byte (1: RDMA after the reply).
def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def rnd(reply, during=None, after=None, fail_send=False):
    a = 15 if fail_send else (0x10 if during is not None else 0)
    out = bytes([a]) + (during or b"")
    if fail_send:
        return out
    out += reply
    if reply[0] % 16 in (14, 15):
        return out
    return out + (bytes([1]) + after if after is not None else bytes([0]))


def call(dir_put, size, rounds, off=0, op=2):
    return bytes([op, 1 if dir_put else 0, off]) + u16(size - 1) + b"".join(rounds)


BIND_A = bytes([0, 0]) + u16(0x22)
BIND_B = bytes([0, 1]) + u16(0x33)
DONE = bytes([4, 0])              # 200, the bound server, the exact count
PROVE = bytes([1])                # WRITE WITH IMMEDIATE, the token's key, its QP
PROVE_WRONG_KEY = bytes([1 | 1 << 3, 5])
MW, FALLBACK = 1, 0

put("transfer_sequence", "get-bind-then-proven-success",
    bytes([MW]) + call(False, 4096, [rnd(BIND_A), rnd(DONE, after=PROVE)]))
put("transfer_sequence", "put-bind-then-success-fallback",
    bytes([FALLBACK]) + call(True, 1000, [rnd(BIND_A), rnd(DONE)]))
put("transfer_sequence", "get-success-without-proof",
    bytes([MW]) + call(False, 512, [rnd(BIND_A), rnd(DONE)]))
put("transfer_sequence", "get-proof-with-another-key",
    bytes([MW]) + call(False, 512, [rnd(BIND_A), rnd(DONE, after=PROVE_WRONG_KEY)]))
put("transfer_sequence", "get-proof-before-the-bind",
    bytes([MW]) + call(False, 512, [rnd(BIND_A, during=PROVE), rnd(DONE)]))
put("transfer_sequence", "replayed-success-next-call",
    bytes([MW]) + call(False, 512, [rnd(BIND_A), rnd(DONE, after=PROVE)])
    + call(False, 512, [rnd(bytes([13, 1]))]))
put("transfer_sequence", "bare-successes",
    bytes([FALLBACK]) + b"".join(call(False, 64, [rnd(BIND_A), rnd(bytes([9, i]), after=PROVE)]) for i in range(5)))
put("transfer_sequence", "success-with-token-no-count",
    bytes([MW]) + call(False, 64, [rnd(BIND_A), rnd(bytes([10, 0]), after=PROVE)]))
put("transfer_sequence", "short-and-long-counts",
    bytes([MW]) + call(False, 100, [rnd(BIND_A), rnd(bytes([4, 3 << 2]), after=PROVE)])
    + call(True, 100, [rnd(BIND_A), rnd(bytes([4, 4 << 2]))]))
put("transfer_sequence", "success-from-another-server-qp",
    bytes([MW]) + call(False, 64, [rnd(BIND_A), rnd(bytes([4, 3, 0, 2]), after=PROVE)]))
put("transfer_sequence", "bogus-server-tokens",
    bytes([MW]) + b"".join(call(False, 64, [rnd(bytes([3, i]))]) for i in range(8)))
put("transfer_sequence", "second-bind-in-one-call",
    bytes([MW]) + call(True, 64, [rnd(BIND_A), rnd(BIND_A)]))
put("transfer_sequence", "two-servers-trade",
    bytes([MW | 1 << 1]) + call(False, 64, [rnd(BIND_A), rnd(DONE, after=PROVE)])
    + call(False, 64, [rnd(BIND_B), rnd(BIND_B), rnd(DONE, after=PROVE)])
    + call(False, 64, [rnd(BIND_A), rnd(DONE, after=PROVE)]))
put("transfer_sequence", "qp-broken-mid-transfer",
    bytes([MW]) + call(False, 64, [rnd(BIND_A), rnd(DONE, during=bytes([4]), after=PROVE)]))
put("transfer_sequence", "stray-completion-between-calls",
    bytes([MW]) + call(False, 64, [rnd(BIND_A), rnd(DONE, after=PROVE)])
    + bytes([1, 1, 0]) + u32(0x1234) + call(False, 64, [rnd(DONE, after=PROVE)]))
put("transfer_sequence", "callbacks-fail",
    bytes([FALLBACK]) + call(True, 64, [rnd(b"", fail_send=True)])
    + call(True, 64, [rnd(bytes([14]))]) + call(True, 64, [rnd(bytes([15]))])
    + call(True, 64, [rnd(bytes([12, 5]) + b"junk!")]))
put("transfer_sequence", "bind-fails-once",
    bytes([MW]) + bytes([0, 1, 0]) + call(False, 64, [rnd(BIND_A)], op=0)[1:])
put("transfer_sequence", "replacement-fails",
    bytes([FALLBACK]) + bytes([0, 6, 0]) + call(True, 64, [rnd(BIND_A), rnd(bytes([11, 0]))], op=0)[1:]
    + call(True, 64, [rnd(BIND_A), rnd(DONE)]))


# app_reply: steps (see the target's `run` and `choose_reply`).
def token(dir_put, size):
    return bytes([0, 1 if dir_put else 0]) + u16(size)


def reply(*b):
    return bytes([2]) + bytes(b)


A_BIND = reply(0, 0) + u16(0x44)
A_DONE = reply(4, 0)
A_PROVE = bytes([4, 0])
put("app_reply", "get-token-bind-prove-success", bytes([MW]) + token(False, 4096) + A_BIND + A_PROVE + A_DONE)
put("app_reply", "put-token-bind-success", bytes([FALLBACK]) + token(True, 100) + A_BIND + A_DONE)
put("app_reply", "get-success-without-proof", bytes([MW]) + token(False, 100) + A_BIND + A_DONE)
put("app_reply", "two-binding-rounds", bytes([MW]) + token(False, 100) + A_BIND + A_BIND)
put("app_reply", "resend-after-success", bytes([MW]) + token(False, 100) + A_BIND + A_PROVE + A_DONE + A_PROVE + A_DONE
    + A_BIND + A_PROVE + A_DONE)
put("app_reply", "success-after-release", bytes([MW]) + token(False, 100) + A_BIND + A_PROVE + bytes([5, 0]) + A_DONE)
put("app_reply", "revoked-tokens-proof", bytes([MW]) + token(False, 100) + A_BIND + token(False, 200)
    + bytes([4, 2, 0]) + A_DONE)
put("app_reply", "deregistered-then-success", bytes([MW]) + token(False, 100) + A_BIND + A_PROVE + bytes([7]) + A_DONE
    + bytes([7]) + token(False, 100) + A_BIND + A_PROVE + A_DONE)
put("app_reply", "malformed-and-error-replies", bytes([FALLBACK]) + token(True, 100) + reply(10, 3) + b"abc"
    + A_BIND + reply(7, 4) + token(True, 100) + reply(7, 0) + reply(8, 0))
put("app_reply", "token-qp-broken", bytes([MW]) + token(False, 100) + A_BIND + bytes([6, 0]) + A_PROVE + A_DONE)
put("app_reply", "failed-replacement", bytes([FALLBACK]) + token(False, 100) + A_BIND + bytes([6, 1, 5, 0])
    + reply(7, 4) + token(False, 100) + A_BIND + A_PROVE + A_DONE)
put("app_reply", "bad-token-sizes", bytes([MW]) + token(False, 0) + token(False, 65535) + token(True, 65535))
put("app_reply", "bogus-server", bytes([MW]) + token(False, 100) + reply(3, 0) + token(False, 100) + reply(3, 4))


# target_request: steps (see the target's `step`). Offsets count 2-byte units
# from the read-write region; the read-only region starts 36864 bytes in.
def req(client=0, put_=False, tsel=0, off=0, length=b"", odd=0, caller=1, rsel=0, extra=b""):
    head = client | (2 if put_ else 0)
    return bytes([head, tsel]) + u16(off & 0xFFFF) + length + bytes([odd, caller, rsel]) + extra


def get(size, seed=5, **kw):
    return req(extra=kw.pop("extra_before", b"") + u16(size) + bytes([seed]), **kw)


L4K = u16(4096)
put("target_request", "get-bind-then-get", get(3000, length=L4K) + get(3000, length=L4K))
put("target_request", "put-bind-then-put", req(put_=True, length=L4K) + req(put_=True, length=L4K))
put("target_request", "get-range-206", get(3000, length=L4K) + req(length=L4K, rsel=1, extra=u16(5000) + u16(100) + u16(700) + bytes([9])))
put("target_request", "get-selection-too-large", get(10, length=u16(100)) + get(101, length=u16(100)))
put("target_request", "get-empty-object", get(0, length=u16(100)) + get(0, length=u16(100)))
put("target_request", "get-forged-key", get(10, length=L4K)
    + bytes([0, 7]) + u32(0xDEADBEEF) + u16(0) + L4K + bytes([0, 1, 0]) + u16(100) + bytes([1]) + get(10, length=L4K))
put("target_request", "get-read-only-key", get(10, length=L4K) + get(10, tsel=5, length=L4K) + get(10, length=L4K))
put("target_request", "put-from-read-only-region", req(put_=True, tsel=5, off=36864 // 2, length=L4K)
    + req(put_=True, tsel=5, off=36864 // 2, length=L4K))
put("target_request", "get-past-the-region", get(10, length=L4K) + get(300, off=(32768 - 100) // 2, length=L4K))
put("target_request", "put-checksums", req(put_=True, length=u16(64)) + req(put_=True, length=u16(64), rsel=4, extra=u32(1))
    + req(put_=True, length=u16(64), rsel=6))
put("target_request", "store-and-source-fail", req(put_=True, length=L4K) + req(put_=True, length=u16(9000), rsel=0x30, extra=bytes([1]))
    + req(put_=True, length=L4K, rsel=0xc0) + get(9000, length=u16(9000), rsel=0x30, extra_before=bytes([1]))
    + get(10, length=L4K, rsel=0xc0))
put("target_request", "refused-tokens", get(1, tsel=5 << 3, length=b"") + get(1, length=L4K, odd=1)
    + get(1, length=L4K, odd=0x20) + get(1, length=L4K, odd=0xFF) + get(1, tsel=7 << 3, length=bytes([0]))
    + get(1, tsel=6 << 3, length=bytes([0])) + get(1, length=L4K, odd=0x30) + get(1, length=L4K, caller=2))
put("target_request", "two-callers-one-binding", get(10, length=L4K) + get(10, client=1, length=L4K)
    + get(10, length=L4K) + get(10, length=L4K))


# rc_v2_control: a flags byte (even: the server side, odd: the client side;
# 2: memory windows on the client), then steps (see the target's `server`
# and `client`).
HONEST = bytes([0, 0x0C, 9])       # no mutation, alice, plain HTTP, signed as the client does
BOB = bytes([0, 0x0D, 9])          # the same, signed by bob


def v2_prepare(put_=True, size=100, cookie=0x1A2B3C4D, psn=1, qsel=3, gid=0, sign=HONEST):
    return bytes([0, 1 if put_ else 0]) + u16(size) + u32(cookie) + u32(psn) + bytes([qsel, gid]) + sign


def v2_ready(sel=0, idx=0, sign=HONEST, then=b"\0", extra=b""):
    # a session the harness holds (the idx-th), the READY chosen by sel, the
    # client's buffer (address, rkey), then the PUT's write chosen by `then`
    return bytes([2, 0, idx, sel]) + extra + u32(0x100) + u32(0x55) + sign + then


def v2_cancel(idx=0, sign=HONEST):
    return bytes([3, 0, idx]) + sign


put("rc_v2_control", "server-put", bytes([0]) + v2_prepare() + v2_ready())
put("rc_v2_control", "server-get", bytes([0]) + v2_prepare(put_=False) + v2_ready())
put("rc_v2_control", "server-put-wrong-immediate", bytes([0]) + v2_prepare() + v2_ready(then=bytes([2])))
put("rc_v2_control", "server-put-short-write", bytes([0]) + v2_prepare() + v2_ready(then=bytes([0x0C])))
put("rc_v2_control", "server-put-broken-qp", bytes([0]) + v2_prepare() + v2_ready(then=bytes([0xF0])))
put("rc_v2_control", "server-ready-wrong-cookie", bytes([0]) + v2_prepare() + v2_ready(sel=3, extra=bytes([7])))
put("rc_v2_control", "server-ready-and-cancel-by-another-key", bytes([0]) + v2_prepare() + v2_ready(sign=BOB)
    + v2_cancel(sign=BOB) + v2_ready())
put("rc_v2_control", "server-cancel-then-ready", bytes([0]) + v2_prepare() + v2_cancel() + v2_ready())
put("rc_v2_control", "server-get-without-buffer", bytes([0]) + v2_prepare(put_=False) + v2_ready(sel=0x20))
put("rc_v2_control", "server-forged", bytes([0]) + b"".join(
    v2_prepare(sign=bytes([0, 0x0C, f]) + (u16(5) if f in (3, 4) else b"") + (bytes([2]) if f == 6 else b""))
    for f in range(8)) + v2_prepare(sign=bytes([0, 0x0C, 8]) + u16(100)))
put("rc_v2_control", "server-session-limit", bytes([0]) + v2_prepare() * 4 + v2_cancel() + v2_prepare())
put("rc_v2_control", "server-bad-tokens", bytes([0]) + v2_prepare(qsel=0) + v2_prepare(qsel=1) + v2_prepare(qsel=2)
    + v2_prepare(gid=5) + v2_prepare(gid=7) + v2_prepare(gid=6) + v2_prepare(gid=4) + v2_prepare(size=5000)
    + v2_prepare(cookie=0) + v2_prepare(psn=0))
put("rc_v2_control", "server-mutated-prepare", bytes([0])
    + v2_prepare(sign=bytes([0xA0, 2, 3, 5]) + b"0x100" + bytes([0x0C, 9])))
put("rc_v2_control", "server-http", bytes([0]) + v2_prepare(sign=bytes([0, 0x00, 9])) + v2_prepare(sign=bytes([0, 0x02, 3, 9]))
    + v2_prepare(sign=bytes([0, 0x04, 9])) + v2_prepare(sign=bytes([0, 0x06, 9])) + v2_prepare(sign=bytes([0, 0x08, 9]))
    + v2_prepare(sign=bytes([0, 0x0A, 9])))

SESSION_ID = bytes(range(1, 17))


def v2_round(put_=False, size=4096, offset=0, a=0x14, which=0, lensel=1, psn=5, events=b"\0", b=0x04, extra_a=b"", extra_b=b"",
             ready_mut=b"\0"):
    # one session: its size and offset, the PREPARE answer (status and token
    # chosen by a), what reaches the QP (a count, then events), the READY
    # answer chosen by b
    return bytes([1 if put_ else 0]) + u16(size) + u16(offset) + bytes([a]) + extra_a + bytes([which]) \
        + u32(0x1234) + u32(0x10000) + bytes([lensel]) + SESSION_ID + u32(psn) + bytes([0]) + events \
        + bytes([b]) + extra_b + bytes([0]) + ready_mut


PROOF = bytes([1, 0])
put("rc_v2_control", "client-get", bytes([3]) + v2_round(events=PROOF))
put("rc_v2_control", "client-get-fallback", bytes([1]) + v2_round(events=PROOF) + v2_round(size=100, offset=7, events=PROOF))
put("rc_v2_control", "client-get-no-write", bytes([3]) + v2_round())
put("rc_v2_control", "client-get-wrong-immediate", bytes([3]) + v2_round(events=bytes([1, 0x10])))
put("rc_v2_control", "client-get-short-write", bytes([3]) + v2_round(events=bytes([1, 0x60])))
put("rc_v2_control", "client-get-write-on-another-qp", bytes([3]) + v2_round(events=bytes([1, 0xC0, 0])))
put("rc_v2_control", "client-get-broken-qp", bytes([3]) + v2_round(events=bytes([2, 0, 5])))
put("rc_v2_control", "client-get-overcount", bytes([3]) + v2_round(events=PROOF, b=0x84))
put("rc_v2_control", "client-get-wrong-echo", bytes([3]) + v2_round(events=PROOF, b=0x34, extra_b=u32(7)))
put("rc_v2_control", "client-put", bytes([1]) + v2_round(put_=True, events=bytes([1, 6])))
put("rc_v2_control", "client-put-short-staging", bytes([1]) + v2_round(put_=True, lensel=0))
put("rc_v2_control", "client-bogus-servers", bytes([3]) + b"".join(v2_round(a=0x04, which=w) for w in range(6)))
put("rc_v2_control", "client-prepare-refused", bytes([3]) + v2_round(a=0x10) + v2_round(a=0x13, extra_a=u16(302)))
put("rc_v2_control", "client-bad-sizes", bytes([3]) + v2_round(size=0) + v2_round(size=16384, offset=1)
    + v2_round(events=PROOF))
# the READY answer, its protocol header dropped, before the PUT's write was
# started: finish_from once called it the server's unusable answer (S3Error)
# and left the session as it was; it is refused as out of order now
put("rc_v2_control", "client-put-ready-before-start", bytes([1]) + v2_round(put_=True, ready_mut=bytes([0xA0, 0, 0])))


# app_reply: a binding round on a token connection whose failed QP made
# the rebind replace its window (the token's key then names no window): an
# RdmaError, not an internal one (found by a 15 s run, 2026-12-07).
put("app_reply", "rebind-replaced-window", base64.b64decode("AQAAZAACAAAARgD+/v8O9wBkAgDqRADz////AA=="))

# store_files: a whole object file as the store writes it (data, JSON
# metadata with block sums, its length, HOB1), the same with a flipped data
# byte, a truncated one; owner records old and new; sums text.
def crc32c(b):
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


import json

def object_file(data, key="k"):
    sums = b"".join(struct.pack("<I", crc32c(data[i:i + 262144])) for i in range(0, len(data), 262144))
    meta = {"key": key, "size": len(data), "etag": "00" * 16, "modified_ms": 0,
            "blocks": {"block": 262144, "crc32c": base64.b64encode(sums).decode()}}
    j = json.dumps(meta).encode()
    return data + j + struct.pack("<I", len(j)) + b"HOB1"

good = object_file(bytes(range(256)) * 4)
put("store_files", "object", good)
put("store_files", "object-flipped", bytes([good[0] ^ 1]) + good[1:])
put("store_files", "object-truncated", good[:-3])
put("store_files", "owner-record", "AKIAEXAMPLE\n0123456789abcdef0123456789abcdef\n")
put("store_files", "owner-record-old", "AKIAEXAMPLE")
# A multipart upload's upload.json, as CreateMultipartUpload writes it.
put("store_files", "upload", '{"bucket":"b","key":"k/part","owner":"AKIAEXAMPLE","attrs":'
    '{"content_type":"text/plain","content_encoding":null,"content_disposition":null,'
    '"content_language":null,"cache_control":null,"metadata":{"a":"1"}},"initiated_ms":1,'
    '"acl":"public-read","checksum":{"algorithm":"crc32c","kind":"full_object"}}')
put("store_files", "sums", struct.pack("<Q", 5) + base64.b64encode(struct.pack("<I", crc32c(b"hello"))))
