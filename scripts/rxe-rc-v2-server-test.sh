#!/usr/bin/env bash
# hipobj-server's hipobj-rc-v2 control path against a client we did not write: hipObject's
# upstream hipobj-v2-data-client (built from ../shared/peers/hipobj-rc-v2 by its build.sh, never
# linked into the project), both on the kernel's rxe0 in the project's VM (scripts/rxe-vm.sh).
#
#   flock /tmp/rxe-vm.lock scripts/rxe-rc-v2-server-test.sh [SIZE...]     (default 8 64 1000 4096)
#
# For each size: the client PUTs over RDMA (its WRITE WITH IMMEDIATE into our staging buffer) and
# the stored file is compared byte for byte with what the client wrote; then the client GETs the
# object back (our WRITE WITH IMMEDIATE into its buffer; the client checks the immediate and the
# first bytes), and a GET of an object stored over plain HTTP checks that direction on its own.
# The server's /.hipobj/metrics must count every transfer as RDMA. Controls: the same client
# against a server with RDMA off must fail with PREPARE 501, and with a wrong secret with 403.
#
# Prints PASS/FAIL per check and "rxe-rc-v2-server-test: PASS|FAIL". Exit status 0 only if every
# check passed.
#
# Environment: HIPOBJ_PEERS_DIR (default ../shared/peers/hipobj-rc-v2), HIPOBJ_PEERS_BUILD (default
# /tmp/hipobj-rc-v2-peers, shared with the other rc-v2 lanes), RXE_VM_DIR as scripts/rxe-vm.sh.
#
# Inside the VM: rxe-rc-v2-server-test.sh --inside PEER_BIN SERVER_BIN [SIZE...]
set -uo pipefail

inside() {
    local bin=$1 server=$2
    shift 2
    local sizes=${*:-8 64 1000 4096}
    local s=/run/scratch/rcv2 port=9100 bucket=rcv2
    local cli=$bin/hipobj-v2-data-client
    local passed=0 failed=0
    mkdir -p "$s"
    pass() { echo "PASS $*"; passed=$((passed + 1)); }
    fail() { echo "FAIL $*"; failed=$((failed + 1)); }

    echo "== environment"
    uname -r
    local g
    for g in 0 1; do
        printf 'rxe0 gid[%s] %s %s\n' "$g" \
            "$(cat /sys/class/infiniband/rxe0/ports/1/gids/$g 2>/dev/null)" \
            "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$g 2>/dev/null)"
    done

    start_server() { # start_server PORT DIR [ARGS...] => sets spid
        local p=$1 d=$2
        shift 2
        RUST_LOG=info "$server" --address 127.0.0.1:"$p" --data-dir "$d" \
            --access-key hipobj-test-key --secret-key "${secret:-hipobj-test-secret}" "$@" \
            >"$d.out" 2>"$d.err" &
        spid=$!
        local i
        for i in $(seq 1 240); do
            curl -s -o /dev/null "http://127.0.0.1:$p/.hipobj/health" && return 0
            kill -0 $spid 2>/dev/null || break
            sleep 0.5
        done
        cat "$d.err"
        return 1
    }
    local spid
    echo "== starting hipobj-server on 127.0.0.1:$port with --rdma-device rxe0"
    if start_server $port "$s/hs" --rdma-device rxe0; then
        pass "server-start"
    else
        fail "server-start"
        echo "RXE-RCV2-SERVER-TEST: FAIL (server did not start)"
        return 1
    fi
    local main=$spid
    local sig=(--aws-sigv4 aws:amz:us-east-1:s3 --user hipobj-test-key:hipobj-test-secret
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' "${sig[@]}" -X PUT -H 'Content-Length: 0' \
        "http://127.0.0.1:$port/$bucket")
    [[ $code == 200 ]] && pass "create-bucket" || fail "create-bucket (HTTP $code)"

    run_client() { # run_client PORT OP TARGET SIZE COOKIE => sets out, rc
        out=$(timeout 120 "$cli" 127.0.0.1 "$1" "$2" "$3" "$4" "$5" 2>&1)
        rc=$?
        printf '%s\n' "$out" | sed 's/^/    client: /'
    }
    metric() { curl -s "http://127.0.0.1:$port/.hipobj/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

    local n key gets=0 puts=0 written=0 read=0
    for n in $sizes; do
        key=obj-$n
        echo "== PUT /$bucket/$key ($n bytes) over RDMA"
        run_client $port PUT "/$bucket/$key" "$n" "$(printf '%08x' $((0x5e000000 + n)))"
        if [[ $rc == 0 && $out == *"dp: PUT ok"* && $out == *"READY status=200 bytes=$n"* ]]; then
            pass "put-$n"
            puts=$((puts + 1))
            read=$((read + n))
        else
            fail "put-$n (client rc=$rc)"
        fi
        { printf 'dp-put-payload'; head -c $((n > 14 ? n - 14 : 0)) /dev/zero; } | head -c "$n" >"$s/expect-$n"
        curl -s "${sig[@]}" -o "$s/got-$n" "http://127.0.0.1:$port/$bucket/$key"
        if cmp -s "$s/expect-$n" "$s/got-$n"; then
            pass "stored-$n (the object is the client's $n bytes, read back over HTTP)"
        else
            fail "stored-$n ($(stat -c %s "$s/got-$n" 2>/dev/null || echo no) bytes read back)"
        fi
        echo "== GET /$bucket/$key ($n bytes) over RDMA"
        run_client $port GET "/$bucket/$key" "$n" "$(printf '%08x' $((0x6e000000 + n)))"
        if [[ $rc == 0 && $out == *"payload verified"* && $out == *"READY status=200 bytes=$n"* ]]; then
            pass "get-$n"
            gets=$((gets + 1))
            written=$((written + n))
        else
            fail "get-$n (client rc=$rc)"
        fi
    done

    key=http-seeded
    { printf 'dp-put-p-seeded-over-http'; head -c 4071 /dev/zero | tr '\0' 'h'; } >"$s/seed"
    code=$(curl -s -o /dev/null -w '%{http_code}' "${sig[@]}" -X PUT --data-binary @"$s/seed" \
        "http://127.0.0.1:$port/$bucket/$key")
    echo "== GET /$bucket/$key (4096 bytes, stored via HTTP PUT $code) over RDMA"
    run_client $port GET "/$bucket/$key" 4096 7e0a0001
    if [[ $code == 200 && $rc == 0 && $out == *"payload verified"* ]]; then
        pass "get-http-seeded-4096"
        gets=$((gets + 1))
        written=$((written + 4096))
    else
        fail "get-http-seeded-4096 (HTTP $code, client rc=$rc)"
    fi

    echo "== the server's counters"
    curl -s "http://127.0.0.1:$port/.hipobj/metrics" | grep -v '^#' | sed 's/^/    /'
    local mg mp mw mr
    mg=$(metric hipobj_rdma_gets_total)
    mp=$(metric hipobj_rdma_puts_total)
    mw=$(metric hipobj_rdma_bytes_written_total)
    mr=$(metric hipobj_rdma_bytes_read_total)
    if [[ $mg == "$gets" && $mp == "$puts" && $mw == "$written" && $mr == "$read" && $gets -gt 0 && $puts -gt 0 ]]; then
        pass "counters (rdma gets=$mg puts=$mp bytes written=$mw read=$mr)"
    else
        fail "counters (rdma gets=$mg/$gets puts=$mp/$puts written=$mw/$written read=$mr/$read)"
    fi

    echo "== control: a wrong secret (the client signs with hipobj-test-secret)"
    local other
    secret=not-the-secret start_server $((port + 2)) "$s/hs-key" --rdma-device rxe0
    other=$spid
    run_client $((port + 2)) PUT "/$bucket/control" 64 1a2b3c4d
    if [[ $rc != 0 && $out == *"PREPARE status=403"* ]]; then
        pass "control-wrong-secret (client fails: PREPARE 403)"
    else
        fail "control-wrong-secret (client rc=$rc)"
    fi
    kill $other 2>/dev/null
    wait $other 2>/dev/null

    echo "== control: the same client against a server with RDMA off (must fail with 501)"
    if start_server $((port + 1)) "$s/hs-nordma"; then
        run_client $((port + 1)) PUT "/$bucket/control" 64 1a2b3c4d
        if [[ $rc != 0 && $out == *"PREPARE status=501"* ]]; then
            pass "control-no-rdma (client fails: PREPARE 501)"
        else
            fail "control-no-rdma (client rc=$rc)"
        fi
        kill $spid 2>/dev/null
        wait $spid 2>/dev/null
    else
        fail "control-no-rdma (server did not start)"
    fi

    kill $main 2>/dev/null
    wait $main 2>/dev/null
    echo "== server log (v2 lines)"
    grep -i -e 'rc-v2' -e 'rdma' "$s/hs.err" | tail -n 40 | sed 's/^/    server: /'

    if [[ $failed == 0 ]]; then
        echo "RXE-RCV2-SERVER-TEST: PASS ($passed checks)"
        return 0
    fi
    echo "RXE-RCV2-SERVER-TEST: FAIL ($failed of $((passed + failed)) checks failed)"
    return 1
}

if [[ ${1:-} == --inside ]]; then
    shift
    inside "$@"
    exit $?
fi

# --- host half ---------------------------------------------------------------------------------
set -e
. "$(dirname "$0")/lib.sh"
for size in "$@"; do
    [[ $size =~ ^[0-9]+$ ]] && ((size >= 8 && size <= 4096)) ||
        { echo "rxe-rc-v2-server-test: SIZE must be 8..4096 (the client's limits): $size" >&2; exit 2; }
done
peers=$(peers_dir)
[[ -n $peers ]] || { echo "rxe-rc-v2-server-test: no peers directory (set HIPOBJ_PEERS_DIR)" >&2; exit 1; }
export HIPOBJ_PEERS_BUILD=${HIPOBJ_PEERS_BUILD:-/tmp/hipobj-rc-v2-peers}
if [[ ! -x $HIPOBJ_PEERS_BUILD/bin/hipobj-v2-data-client ]]; then
    bash "$peers/build.sh" >&2
fi
server=$(build_workspace)/hipobj-server
[[ -x $server ]] || { echo "rxe-rc-v2-server-test: no $server" >&2; exit 1; }
echo "rxe-rc-v2-server-test: client $(sed -n 3p "$HIPOBJ_PEERS_BUILD/bin/BUILDINFO"); server $server"
rc=0
scripts/rxe-vm.sh /bin/bash "$root/scripts/rxe-rc-v2-server-test.sh" --inside \
    "$HIPOBJ_PEERS_BUILD/bin" "$server" "$@" || rc=$?
if [[ $rc == 0 ]]; then
    echo "rxe-rc-v2-server-test: PASS"
else
    echo "rxe-rc-v2-server-test: FAIL (exit status $rc)"
fi
exit $rc
