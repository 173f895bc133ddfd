#!/usr/bin/env bash
# The hipobj CLI against a hipobj-rc-v2 server we did not write: elbencho's
# s3rdma-server (built from ../shared/peers/hipobj-rc-v2 by its build.sh),
# both on rxe0 inside the rxe VM (scripts/rxe-vm.sh). One unchanged client
# command per transfer, with --require-rdma: the binding exchange is
# declined (501 + unsupported), the client switches to hipobj-rc-v2.
#
#   scripts/rxe-rc-v2-client-test.sh [SIZE...]     default sizes: 1 4097 1048576 67108864
#
# Checks, for each size: PUT over RDMA, the stored file equal to the input,
# GET over RDMA equal to the input; then ranged GETs (one range, and a
# 64 MiB object fetched with --part-size 16 MiB: its first range, then the
# other three in flight), the server's log counting one hipobj-rc-v2
# transfer per part (a GET of N bytes is ceil(N / 16 MiB) of them), and the
# CLI never falling back. A PUT of any size is one transfer: hipobj-rc-v2
# has no UploadPart.
# Control: against a second server started with --no-rdma, --require-rdma
# fails, and without it the bytes come over plain HTTP with a warning.
# Multi-homed (docs/protocol.md section 8): the server's RDMA GID
# (192.0.2.1) is not its endpoint's address. Over https, through stunnel
# in front of it with a certificate for localhost signed by a CA made here
# (given as --ca-bundle), a PUT and a GET move by hipobj-rc-v2 with no
# HIPOBJ_ALLOW_PEER_GID; over plain http to 127.0.0.1 the same PUT and GET
# are refused with one line naming the GID and the fix.
# Prints PASS/FAIL per check and "RCV2-CLIENT: PASS (N checks)".
#
# Env: HIPOBJ_PEERS_DIR (the peers' sources; default ../shared/peers/hipobj-rc-v2
# or /work/shared/peers/hipobj-rc-v2), HIPOBJ_PEERS_BUILD (default
# /tmp/hipobj-rc-v2-peers), RXE_VM_DIR as for scripts/rxe-vm.sh, HIPOBJ_CLI (a
# built hipobj to use; default: the workspace is built as every lane builds it).
# Run the VM under `flock /tmp/rxe-vm.lock` when others share it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

peers_dir=$(peers_dir)
[[ -n $peers_dir ]] || { echo "rxe-rc-v2-client-test: no peers directory (set HIPOBJ_PEERS_DIR)" >&2; exit 1; }
export HIPOBJ_PEERS_BUILD=${HIPOBJ_PEERS_BUILD:-/tmp/hipobj-rc-v2-peers}
[[ -x $HIPOBJ_PEERS_BUILD/bin/s3rdma-server ]] || bash "$peers_dir/build.sh"

hipobj=${HIPOBJ_CLI:-$(build_workspace)/hipobj}
[[ -x $hipobj ]] || { echo "rxe-rc-v2-client-test: no $hipobj" >&2; exit 1; }

sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1 4097 1048576 67108864)

inner=$(mktemp /tmp/rxe-rc-v2-client.XXXXXX.sh)
# A CA and a certificate for localhost (and 127.0.0.1) for the TLS relay,
# made here: the VM sees the host's /tmp read-only.
tls=$(mktemp -d /tmp/rxe-rc-v2-tls.XXXXXX)
trap 'rm -f "$inner"; rm -rf "$tls"' EXIT
(
    cd "$tls"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -subj "/CN=rxe-rc-v2 test CA" -days 2
    openssl req "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost"
    printf '%s\n' subjectAltName=DNS:localhost,IP:127.0.0.1 basicConstraints=CA:FALSE \
        keyUsage=critical,digitalSignature extendedKeyUsage=serverAuth >ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -out server.pem
) >"$tls/openssl.log" 2>&1 || { cat "$tls/openssl.log" >&2; exit 1; }
chmod -R a+rX "$tls"
cat >"$inner" <<EOF
set -u
P=$HIPOBJ_PEERS_BUILD/bin
H=$hipobj
TLS=$tls
SIZES="${sizes[*]}"
EOF
cat >>"$inner" <<'EOF'
S=/run/scratch
checks=0 failed=0
pass() { checks=$((checks + 1)); echo "PASS $*"; }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

start_server() { # PORT DIR ARGS...
    local port=$1 dir=$2; shift 2
    mkdir -p "$dir"
    $P/s3rdma-server --dir "$dir" --addr 127.0.0.1 --port "$port" "$@" >"$dir.log" 2>&1 &
    for _ in $(seq 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && return 0; sleep 0.5; done
    echo "server on $port did not start"; cat "$dir.log"; return 1
}
start_server 9000 $S/elb --rdma-addr 192.0.2.1 --no-cuobj --verbose || exit 1
start_server 9001 $S/plain --no-rdma || exit 1
curl -s -X PUT http://127.0.0.1:9000/bkt >/dev/null
curl -s -X PUT http://127.0.0.1:9001/bkt >/dev/null
export AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any AWS_REGION=us-east-1
rdma=(--endpoint-url http://127.0.0.1:9000 --nic-hint rxe0 --require-rdma)
transfers=0
# A GET larger than the part size moves its first part alone (which finds
# the protocol), then the rest in parts of that size, several in flight,
# each its own hipobj-rc-v2 session: one transfer per part (SIZE PART). A
# PUT goes whole (rc-v2 has no UploadPart).
get_transfers() { echo $(( ($1 + $2 - 1) / $2 )); }

# Multi-homed: the server's HTTP endpoint is 127.0.0.1 (or localhost) and
# its RDMA NIC 192.0.2.1 (docs/protocol.md section 8). Over https, with the
# endpoint's certificate verified, the PREPARE answer may name any unicast
# GID: no HIPOBJ_ALLOW_PEER_GID. elbencho serves no TLS: stunnel relays
# https://localhost:9443 to it.
cat >$S/stunnel.conf <<CONF
foreground = yes
pid =
[s3]
accept = 127.0.0.1:9443
connect = 127.0.0.1:9000
cert = $TLS/server.pem
key = $TLS/server.key
CONF
stunnel4 $S/stunnel.conf >$S/stunnel.log 2>&1 &
for _ in $(seq 60); do grep -q 'Configuration successful' $S/stunnel.log && break; sleep 0.5; done
tls=(--endpoint-url https://localhost:9443 --ca-bundle $TLS/ca.pem --nic-hint rxe0 --require-rdma)
# 20 MiB: the GET is a first 16 MiB range, then the rest.
head -c $((20 << 20)) /dev/urandom >$S/in.tls
if env -u HIPOBJ_ALLOW_PEER_GID $H put "${tls[@]}" $S/in.tls s3://bkt/tls 2>$S/tls-put.err; then
    pass "https PUT of 20 MiB, GID 192.0.2.1, no HIPOBJ_ALLOW_PEER_GID"
    transfers=$((transfers + 1))
else
    fail "https PUT without HIPOBJ_ALLOW_PEER_GID: $(tail -3 $S/tls-put.err)"
fi
check "stored object (https PUT) equals the input" cmp -s $S/in.tls $S/elb/bkt/tls
if env -u HIPOBJ_ALLOW_PEER_GID $H get "${tls[@]}" s3://bkt/tls $S/out.tls 2>$S/tls-get.err; then
    pass "https GET of 20 MiB, GID 192.0.2.1, no HIPOBJ_ALLOW_PEER_GID"
    transfers=$((transfers + $(get_transfers $((20 << 20)) $((16 << 20)))))
else
    fail "https GET without HIPOBJ_ALLOW_PEER_GID: $(tail -3 $S/tls-get.err)"
fi
check "https GET equals the input" cmp -s $S/in.tls $S/out.tls
n=$(grep -c 'RDMA [A-Z]* bkt/tls: .* (hipobj-rc-v2' $S/elb.log || true)
check "server log: the https PUT and GET were $n hipobj-rc-v2 transfers, 3 expected" test "$n" -eq 3
n=$(grep -c 'accepted connection' $S/stunnel.log || true)
check "the relay carried them: $n TLS connections accepted" test "$n" -ge 2

# Over plain http to 127.0.0.1 the endpoint check stays: the same PREPARE
# answer is refused, in one line that names the GID and the fix.
head -c 4096 /dev/urandom >$S/in.peer
refused() { # WHAT ERRFILE
    local line
    line=$(head -1 $2)
    if [ "$(grep -c "" $2)" -eq 1 ] && grep -q '192\.0\.2\.1' $2 && grep -q HIPOBJ_ALLOW_PEER_GID $2; then
        pass "$1 refused in one line: $line"
    else
        fail "$1: not the one-line refusal naming 192.0.2.1 and HIPOBJ_ALLOW_PEER_GID:"
        cat $2
    fi
}
if env -u HIPOBJ_ALLOW_PEER_GID $H put "${rdma[@]}" $S/in.peer s3://bkt/peer 2>$S/peer.err; then
    fail "plain http PUT: a PREPARE answer naming 192.0.2.1 was accepted for endpoint 127.0.0.1"
else
    refused "plain http PUT" $S/peer.err
fi
check "nothing was stored by the refused PUT" test ! -e $S/elb/bkt/peer
if env -u HIPOBJ_ALLOW_PEER_GID $H get "${rdma[@]}" s3://bkt/tls $S/out.peer 2>$S/peer-get.err; then
    fail "plain http GET: a PREPARE answer naming 192.0.2.1 was accepted for endpoint 127.0.0.1"
else
    refused "plain http GET" $S/peer-get.err
fi
check "the refused GET wrote no file" test ! -e $S/out.peer
export HIPOBJ_ALLOW_PEER_GID=192.0.2.1

for size in $SIZES; do
    head -c "$size" /dev/urandom >$S/in.$size
    t0=$(date +%s.%N)
    if $H put "${rdma[@]}" $S/in.$size s3://bkt/k$size 2>$S/put.$size.err; then
        t1=$(date +%s.%N)
        pass "PUT $size bytes over RDMA ($(echo "$t1 - $t0" | bc) s)"
        transfers=$((transfers + 1))
    else
        fail "PUT $size bytes: $(tail -3 $S/put.$size.err)"
    fi
    check "stored object of $size bytes equals the input" cmp -s $S/in.$size $S/elb/bkt/k$size
    t0=$(date +%s.%N)
    if $H get "${rdma[@]}" s3://bkt/k$size $S/out.$size 2>$S/get.$size.err; then
        t1=$(date +%s.%N)
        pass "GET $size bytes over RDMA ($(echo "$t1 - $t0" | bc) s)"
        transfers=$((transfers + $(get_transfers $size $((16 << 20)))))
    else
        fail "GET $size bytes: $(tail -3 $S/get.$size.err)"
    fi
    check "GET of $size bytes equals the input" cmp -s $S/in.$size $S/out.$size
done

# Ranged GETs, on the largest object.
big=$(for s in $SIZES; do echo $s; done | sort -n | tail -1)
if [[ $big -gt 200000 ]]; then
    if $H get "${rdma[@]}" --range 100000-199999 s3://bkt/k$big $S/range 2>$S/range.err; then
        transfers=$((transfers + 1))
        # (a file, not <(...): the VM's chroot has no /dev/fd)
        tail -c +100001 $S/in.$big | head -c 100000 >$S/slice
        check "ranged GET bytes=100000-199999 equals the slice" cmp -s $S/range $S/slice
    else
        fail "ranged GET: $(tail -3 $S/range.err)"
    fi
    part=$(( (big + 3) / 4 ))
    if $H get "${rdma[@]}" --part-size $part s3://bkt/k$big $S/parts 2>$S/parts.err; then
        transfers=$((transfers + $(get_transfers $big $part)))
        check "GET of $big bytes with --part-size $part equals the input" cmp -s $S/in.$big $S/parts
    else
        fail "GET in ranges: $(tail -3 $S/parts.err)"
    fi
fi

# Every RDMA request was one hipobj-rc-v2 transfer at the server, and the
# client never said it fell back.
n=$(grep -c 'bytes (hipobj-rc-v2' $S/elb.log || true)
check "server log: $n hipobj-rc-v2 transfers, $transfers expected" test "$n" -eq "$transfers"
check "no fallback to plain HTTP" bash -c "! grep -l 'plain HTTP' $S/*.err"
grep 'hipobj-rc-v2' $S/elb.log | head -20

# Control: RDMA off at the server.
head -c 5000 /dev/urandom >$S/in.plain
curl -s -X PUT --data-binary @$S/in.plain http://127.0.0.1:9001/bkt/p >/dev/null
if $H get --endpoint-url http://127.0.0.1:9001 --nic-hint rxe0 --require-rdma s3://bkt/p $S/out.plain 2>$S/plain-req.err; then
    fail "--require-rdma against a --no-rdma server succeeded"
else
    pass "--require-rdma against a --no-rdma server fails: $(tail -1 $S/plain-req.err)"
fi
if $H get --endpoint-url http://127.0.0.1:9001 --nic-hint rxe0 s3://bkt/p $S/out.plain 2>$S/plain.err; then
    check "plain HTTP fallback moved the right bytes" cmp -s $S/in.plain $S/out.plain
    check "the fallback was said out loud" grep -q 'plain HTTP' $S/plain.err
    cat $S/plain.err
else
    fail "plain fallback: $(tail -3 $S/plain.err)"
fi

if [[ $failed -eq 0 ]]; then
    echo "RCV2-CLIENT: PASS ($checks checks)"
    exit 0
fi
echo "RCV2-CLIENT: FAIL ($failed of $checks checks failed)"
tail -30 $S/elb.log
exit 1
EOF
chmod a+r "$inner"
scripts/rxe-vm.sh /bin/bash "$inner"
