#!/usr/bin/env bash
# Scale-out by hand against a real distributed S3 store: a three-node garage
# cluster (replication factor 3, one node per zone), three hipobj-server
# gateways in front of it (gateway i talks to garage node i), and `hipobj`
# CLI clients spread across the gateways over RDMA on the soft NIC.
#
#   1. objects of 1 KiB to 64 MiB written through one gateway and read back
#      through another, bytes compared;
#   2. six clients in parallel, each putting and getting its own objects
#      in a loop; gateway 1 is SIGKILLed as soon as an RDMA transfer is in
#      flight on it. Every client must finish without an error (its calls
#      fail over to the next gateway and bind afresh there), and a final
#      sweep reads every key back and lists the bucket with boto3
#      straight from garage: nothing lost or torn;
#   3. garage node 1 stopped: writes and reads through gateways 0 and 2
#      still work (RF=3 keeps a quorum of two), and every earlier object
#      still reads back whole.
#
# Not run in CI: garage takes about 11 minutes to build. It is AGPL and is
# only ever run here as an external binary. Build it once with
#   CARGO_TARGET_DIR=/tmp/garage-build cargo install garage --locked \
#     --no-default-features --features sqlite,bundled-libs --root /tmp/garage
# then run
#   scripts/garage-by-hand.sh /tmp/garage/bin/garage
# Everything lives under $HIPOBJ_GARAGE_WORK (default /tmp/garage-by-hand),
# removed at the end. docs/testing.md ("Scale-out against garage") says
# what has run (garage 2.5.0, 2026-12-01). Needs boto3 in the venv that
# scripts/s3-clients.sh makes (or HIPOBJ_S3_VENV).
set -euo pipefail

GARAGE=${1:?usage: $0 /path/to/garage}
GARAGE=$(realpath "$GARAGE")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${HIPOBJ_GARAGE_WORK:-/tmp/garage-by-hand}
BASE=${HIPOBJ_GARAGE_PORT_BASE:-39100}
CLIENTS=6
ROUNDS=4
LOOP_SIZE=$((16 << 20))
AK=hipobj-gw-key
SK=hipobj-gw-secret

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "  ok: $*"; }
fail() { FAIL=$((FAIL + 1)); echo "  FAIL: $*"; }
step() { echo; echo "== $*"; }

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"

step "build hipobj-server and hipobj (debug)"
(cd "$ROOT" && cargo build -q -p hipobj-server -p hipobj-cli)
SERVER=$ROOT/target/debug/hipobj-server
HIPOBJ=$ROOT/target/debug/hipobj
"$GARAGE" --version 2>&1 | head -n 1 || true

# Ports: garage node i: RPC BASE+i, S3 BASE+10+i, admin BASE+20+i;
# gateway i: BASE+30+i.
rpc() { echo $((BASE + $1)); }
s3p() { echo $((BASE + 10 + $1)); }
gwp() { echo $((BASE + 30 + $1)); }

step "three garage nodes, one rpc_secret, connected"
SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
GPIDS=()
for i in 0 1 2; do
  d=$WORK/garage$i
  mkdir -p "$d/meta" "$d/data"
  cat > "$d/garage.toml" <<EOF
metadata_dir = "$d/meta"
data_dir = "$d/data"
db_engine = "sqlite"
replication_factor = 3
rpc_bind_addr = "127.0.0.1:$(rpc $i)"
rpc_public_addr = "127.0.0.1:$(rpc $i)"
rpc_secret = "$SECRET"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$(s3p $i)"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$((BASE + 20 + i))"
EOF
  RUST_LOG=warn "$GARAGE" -c "$d/garage.toml" server > "$d/log" 2>&1 &
  GPIDS[$i]=$!
  PIDS+=($!)
done
g() { "$GARAGE" -c "$WORK/garage0/garage.toml" "$@"; }
gi() { local i=$1; shift; "$GARAGE" -c "$WORK/garage$i/garage.toml" "$@"; }
for i in 0 1 2; do
  for _ in $(seq 100); do
    gi "$i" node id -q > "$WORK/garage$i/id" 2>/dev/null && break
    sleep 0.2
  done
  echo "node $i: $(cat "$WORK/garage$i/id")"
done
g node connect "$(cat "$WORK/garage1/id")"
g node connect "$(cat "$WORK/garage2/id")"

step "layout: three zones, 1 GB each, replication factor 3; a key and a bucket"
for i in 0 1 2; do
  id=$(cut -d@ -f1 < "$WORK/garage$i/id")
  g layout assign -z "zone$i" -c 1G "$id"
done
g layout apply --version 1
g status
KEY_OUT=$(g key create hipobj-gateways)
BAK=$(echo "$KEY_OUT" | awk '/Key ID/ {print $NF}')
BSK=$(echo "$KEY_OUT" | awk '/Secret key/ {print $NF}')
[ -n "$BAK" ] && [ -n "$BSK" ] || { echo "no key in: $KEY_OUT"; exit 1; }
g bucket create bkt
g bucket allow --read --write --owner bkt --key hipobj-gateways

step "three hipobj-server gateways, gateway i in front of garage node i, RDMA on the soft NIC"
GW=()
for i in 0 1 2; do
  cat > "$WORK/gw$i.toml" <<EOF
address = "127.0.0.1:$(gwp $i)"
metrics_log_secs = 0
[[credentials]]
access_key = "$AK"
secret_key = "$SK"
[storage]
kind = "s3"
endpoint = "http://127.0.0.1:$(s3p $i)"
region = "garage"
access_key = "$BAK"
secret_key = "$BSK"
path_style = true
[rdma]
enabled = true
device = "softroce0"
backend = "softroce"
EOF
  HIPOBJ_LOG=warn "$SERVER" --config "$WORK/gw$i.toml" > "$WORK/gw$i.log" 2>&1 &
  GW[$i]=$!
  PIDS+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$(gwp $i)/.hipobj/metrics" > /dev/null && break
    sleep 0.2
  done
done
url() { echo "http://127.0.0.1:$(gwp $1)"; }
# The endpoint list starting at gateway $1, over the gateways in "$LIVE".
LIVE="0 1 2"
list() {
  local first=$1 out="" i
  for i in $LIVE $LIVE; do
    if [ -z "$out" ]; then [ "$i" = "$first" ] && out=$(url "$i"); continue; fi
    [ "$i" = "$first" ] && break
    out="$out,$(url "$i")"
  done
  echo "$out"
}
hipobj() {
  AWS_ACCESS_KEY_ID=$AK AWS_SECRET_ACCESS_KEY=$SK AWS_REGION=us-east-1 \
    "$HIPOBJ" "$@" --nic-hint softroce0 --require-rdma
}
metric() {
  { curl -s --max-time 2 "$(url "$1")/.hipobj/metrics" || true; } | awk -v m="$2" '$1 == m {print $2}'
}
# Listing straight from garage is boto3's (a client we did not write): curl
# 7.88's --aws-sigv4 signs a query string unsorted and unencoded, which garage
# rightly refuses ("Invalid signature"). The venv is scripts/s3-clients.sh's.
PY=${HIPOBJ_S3_VENV:-/tmp/hipobj-s3-venv}/bin/python
[ -x "$PY" ] || { echo "no boto3 venv at $PY: run scripts/s3-clients.sh once"; exit 1; }
garage_ls() { # garage_ls NODE WHAT PREFIX: "KEY SIZE" lines, or upload ids
  "$PY" - "http://127.0.0.1:$(s3p "$1")" "$BAK" "$BSK" "$2" "$3" <<'PYEOF'
import sys, boto3
url, ak, sk, what, prefix = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=url, region_name="garage",
                  aws_access_key_id=ak, aws_secret_access_key=sk)
if what == "objects":
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bkt", Prefix=prefix):
        for o in page.get("Contents", []):
            print(o["Key"], o["Size"])
else:
    for u in s3.list_multipart_uploads(Bucket="bkt").get("Uploads", []):
        print(u["UploadId"])
PYEOF
}

# put KEY FILE FIRST_GATEWAY; get KEY OUT FIRST_GATEWAY (stderr to $WORK/err)
put() { hipobj put "$2" "s3://bkt/$1" --part-size 8MiB --endpoint-url "$(list "$3")" 2>> "$WORK/err"; }
get() { hipobj get "s3://bkt/$1" "$2" --endpoint-url "$(list "$3")" 2>> "$WORK/err"; }

step "1. objects of 1 KiB to 64 MiB: written through gateway c, read through gateway c+1"
mkdir -p "$WORK/files"
: > "$WORK/err"
SIZES="1024 65537 1048576 5242881 16777216 67108864"
for s in $SIZES; do
  head -c "$s" /dev/urandom > "$WORK/files/p1-$s"
done
for s in $SIZES; do
  for c in 0 1 2; do
    key="p1/$s-$c"
    if put "$key" "$WORK/files/p1-$s" "$c" && get "$key" "$WORK/out" $(((c + 1) % 3)) \
      && cmp -s "$WORK/files/p1-$s" "$WORK/out"; then
      pass "$key: put via gateway $c, get via gateway $(((c + 1) % 3)), bytes equal"
    else
      fail "$key"
    fi
  done
done
grep -q "plain HTTP" "$WORK/err" && fail "something moved over plain HTTP: $(cat "$WORK/err")"
for i in 0 1 2; do
  echo "  gateway $i: rdma gets $(metric "$i" hipobj_rdma_gets_total), puts $(metric "$i" hipobj_rdma_puts_total), binds $(metric "$i" hipobj_rdma_binds_total)"
done

step "2. $CLIENTS clients x $ROUNDS rounds of $((LOOP_SIZE >> 20)) MiB put+get; gateway 1 killed mid-transfer"
head -c "$LOOP_SIZE" /dev/urandom > "$WORK/files/base"
client_loop() {
  local c=$1 r f="$WORK/files/c$c" o="$WORK/files/c$c.out"
  cp "$WORK/files/base" "$f"
  for r in $(seq "$ROUNDS"); do
    # Each object names its writer and round in its first bytes.
    printf 'client %02d round %02d' "$c" "$r" | dd of="$f" conv=notrunc status=none
    hipobj put "$f" "s3://bkt/p2/$c-$r" --part-size 8MiB --endpoint-url "$(list $((c % 3)))" \
      2>> "$WORK/c$c.err" || return 1
    hipobj get "s3://bkt/p2/$c-$r" "$o" --part-size 4MiB --endpoint-url "$(list $((c % 3)))" \
      2>> "$WORK/c$c.err" || return 1
    cmp -s "$f" "$o" || { echo "client $c round $r: bytes differ" >> "$WORK/c$c.err"; return 1; }
    md5sum < "$f" | awk -v k="p2/$c-$r" '{print k, $1}' >> "$WORK/c$c.sums"
  done
}
CPIDS=()
for c in $(seq 0 $((CLIENTS - 1))); do
  : > "$WORK/c$c.err"
  : > "$WORK/c$c.sums"
  client_loop "$c" &
  CPIDS[$c]=$!
done
killed=0
for _ in $(seq 20000); do
  n=$(metric 1 hipobj_rdma_in_flight)
  if [ "${n:-0}" -gt 0 ]; then
    kill -9 "${GW[1]}"
    killed=1
    echo "  gateway 1 SIGKILLed with $n RDMA transfer(s) in flight"
    break
  fi
  running=0
  for p in "${CPIDS[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
  [ "$running" = 1 ] || break
done
[ "$killed" = 1 ] && pass "gateway 1 killed during an RDMA transfer" || fail "no transfer seen in flight on gateway 1"
ok_clients=0
for c in $(seq 0 $((CLIENTS - 1))); do
  if wait "${CPIDS[$c]}"; then ok_clients=$((ok_clients + 1)); else fail "client $c: $(tail -n 3 "$WORK/c$c.err")"; fi
done
[ "$ok_clients" = "$CLIENTS" ] && pass "all $CLIENTS clients finished every round with the bytes equal"
fo_lines=$(cat "$WORK"/c*.err | grep -c "failing over to" || true)
fo_clients=$(grep -l "failing over to" "$WORK"/c*.err | wc -l || true)
echo "  failover lines on stderr: $fo_lines, from $fo_clients clients"
[ "$fo_lines" -gt 0 ] && pass "clients failed over" || fail "no client failed over"
grep -h "failing over to" "$WORK"/c*.err | sed 's/: the S3 server \(could not be reached\|refused the connection\).*; failing/ ...; failing/' | sort | uniq -c | sed 's/^/    /'
echo "  gateway 0 binds $(metric 0 hipobj_rdma_binds_total), gateway 2 binds $(metric 2 hipobj_rdma_binds_total)"
LIVE="0 2"

step "   sweep: every key read back through the survivors and listed from garage"
cat "$WORK"/c*.sums > "$WORK/sums"
swept=0
while read -r key sum; do
  if get "$key" "$WORK/out" 0 && [ "$(md5sum < "$WORK/out" | cut -d' ' -f1)" = "$sum" ]; then
    swept=$((swept + 1))
  else
    fail "$key does not read back as written"
  fi
done < "$WORK/sums"
want=$((CLIENTS * ROUNDS))
[ "$swept" = "$want" ] && pass "all $want keys read back as written"
listing=$(garage_ls 0 objects p2/ || true)
listed=$(echo "$listing" | grep -c . || true)
sizes=$(echo "$listing" | awk '{print $2}' | sort -u | tr '\n' ' ' || true)
[ "$listed" = "$want" ] && [ "$sizes" = "$LOOP_SIZE " ] \
  && pass "garage lists exactly $want p2/ keys, each of $LOOP_SIZE bytes" \
  || fail "garage lists $listed keys, sizes $sizes"
uploads=$( { garage_ls 0 uploads "" || true; } | grep -c . || true)
echo "  multipart uploads left open in garage: $uploads"

step "3. garage node 1 stopped: reads and writes through gateways 0 and 2"
kill -TERM "${GPIDS[1]}"
wait "${GPIDS[1]}" 2>/dev/null || true
# Garage notices a dead node by its pings: wait until node 0 lists it as
# failed, so that what follows really runs with one node of three down.
down=0
for _ in $(seq 60); do
  g status 2>&1 | grep -q "FAILED NODES" && { down=1; break; }
  sleep 1
done
g status 2>&1 | sed 's/^/    /' | head -n 20
[ "$down" = 1 ] && pass "garage node 0 reports node 1 failed" || fail "garage never reported node 1 down"
: > "$WORK/err"
for s in 1024 5242881 67108864; do
  for c in 0 2; do
    key="p3/$s-$c"
    other=$((2 - c))
    if put "$key" "$WORK/files/p1-$s" "$c" && get "$key" "$WORK/out" "$other" \
      && cmp -s "$WORK/files/p1-$s" "$WORK/out"; then
      pass "$key: put via gateway $c, get via gateway $other with a garage node down"
    else
      fail "$key with a garage node down: $(tail -n 2 "$WORK/err")"
    fi
  done
done
old=0
for s in $SIZES; do
  for c in 0 1 2; do
    if get "p1/$s-$c" "$WORK/out" 2 && cmp -s "$WORK/files/p1-$s" "$WORK/out"; then
      old=$((old + 1))
    else
      fail "p1/$s-$c no longer reads back"
    fi
  done
done
[ "$old" = 18 ] && pass "all 18 objects of step 1 read back whole with a garage node down"

step "   observed: a gateway restarted in front of the stopped garage node"
HIPOBJ_LOG=warn "$SERVER" --config "$WORK/gw1.toml" > "$WORK/gw1b.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "$(url 1)/.hipobj/metrics" > /dev/null && break; sleep 0.2; done
code=$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AK:$SK" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  "$(url 1)/bkt/p1/1024-0")
echo "  a signed GET through it answers HTTP $code (a client fails over on no answer or 502/503/504 only)"

echo
echo "garage by hand: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ] && echo "GARAGE-BY-HAND: PASS" || echo "GARAGE-BY-HAND: FAIL"
[ "$FAIL" = 0 ]
