#!/usr/bin/env bash
# By hand (not a CI lane): the hipobj CLI against elbencho's s3rdma-server
# with an object larger than one hipobj-rc-v2 transfer may be
# (MAX_TRANSFER_SIZE, 2^31-1 bytes, in its HipObjV2Server.cpp; it stages
# each transfer whole in one registered buffer), both on rxe0 in the rxe
# VM (scripts/rxe-vm.sh).
#
#   scripts/rxe-rc-v2-large.sh [SIZE]        default 2 GiB + 1 MiB (2148532224)
#
# The object is made here once (random bytes, kept with its sha256 under
# $RXE_LARGE_DIR, default /var/tmp/hipobj-rc-v2-large) and served by
# elbencho through a link to it (the VM sees the host's / read-only); the
# GET and the PUT's object are written to a scratch ext4 disk given to
# the VM, read back here with debugfs and compared by sha256. Checks:
#
# - GET with --require-rdma: exit 0, sha256 equal, every byte by
#   hipobj-rc-v2 (the server's log: the sessions' byte counts add up to
#   SIZE, none over 2^31-1, more than one session), no fallback.
# - PUT of the same file: hipobj-rc-v2 has no parts (elbencho advertises
#   no `mp`) and one transfer holds at most 2^31-1 bytes, so the CLI makes
#   it a multipart upload. With --require-rdma: refused in one line,
#   nothing stored, the upload aborted. Without: the parts go over plain
#   HTTP, said on stderr, no hipobj-rc-v2 PUT session at the server, and
#   the stored object (read back here) has the object's sha256.
#
# Takes about 30 minutes of VM with a debug CLI, nearly all of it the PUT
# over plain HTTP (the debug build's SigV4 payload hash, under TCG); the
# GET about 75 s. Needs 3 x SIZE of (sparse) disk under $RXE_LARGE_DIR.
#
# Env: HIPOBJ_CLI (a built hipobj; default: the workspace is built as the
# lanes build it), RXE_VM_TIMEOUT (default 3600 s), HIPOBJ_PEERS_DIR /
# HIPOBJ_PEERS_BUILD as for scripts/rxe-rc-v2-client-test.sh. Run alone or
# under `flock /tmp/rxe-vm.lock`: one VM at a time.
# Prints PASS/FAIL per check and "RCV2-LARGE: PASS (N checks)".
set -euo pipefail
. "$(dirname "$0")/lib.sh"

peers_dir=$(peers_dir)
[[ -n $peers_dir ]] || { echo "rxe-rc-v2-large: no peers directory (set HIPOBJ_PEERS_DIR)" >&2; exit 1; }
export HIPOBJ_PEERS_BUILD=${HIPOBJ_PEERS_BUILD:-/tmp/hipobj-rc-v2-peers}
[[ -x $HIPOBJ_PEERS_BUILD/bin/s3rdma-server ]] || bash "$peers_dir/build.sh"
hipobj=${HIPOBJ_CLI:-$(build_workspace)/hipobj}
[[ -x $hipobj ]] || { echo "rxe-rc-v2-large: no $hipobj" >&2; exit 1; }
command -v debugfs >/dev/null || { echo "rxe-rc-v2-large: needs debugfs (e2fsprogs)" >&2; exit 1; }

size=${1:-$(((2 << 30) + (1 << 20)))}
dir=${RXE_LARGE_DIR:-/var/tmp/hipobj-rc-v2-large}
mkdir -p "$dir"
src=$dir/object.$size
if [[ ! -f $src.sha256 || $(stat -c %s "$src" 2>/dev/null || echo 0) != "$size" ]]; then
    echo "rxe-rc-v2-large: making $src ($size random bytes)" >&2
    head -c "$size" /dev/urandom >"$src"
    sha256sum "$src" | cut -d' ' -f1 >"$src.sha256"
fi
chmod a+r "$src"
want=$(cat "$src.sha256")

disk=$dir/disk.img
rm -f "$disk"
# The GET's file, the PUT's parts and then its object: three times SIZE.
truncate -s $((size / (1 << 30) * 3 + 4))G "$disk"
mkfs.ext4 -q -F "$disk"

inner=$(mktemp /tmp/rxe-rc-v2-large.XXXXXX.sh)
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<EOF
set -u
P=$HIPOBJ_PEERS_BUILD/bin
H=$hipobj
SRC=$src
SIZE=$size
EOF
cat >>"$inner" <<'EOF'
S=/run/scratch D=/run/disk
mkdir -p $D && mount -t ext4 /dev/vda $D || { echo "FAIL mounting the scratch disk"; exit 1; }
checks=0 failed=0
pass() { checks=$((checks + 1)); echo "PASS $*"; }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
finish() { sync; umount $D; echo "CHECKS $checks FAILED $failed"; exit 0; }

# elbencho serves the object through a link to the host's file.
mkdir -p $D/elb/bkt
ln -s $SRC $D/elb/bkt/big
$P/s3rdma-server --dir $D/elb --addr 127.0.0.1 --port 9000 --rdma-addr 192.0.2.1 --no-cuobj --verbose >$S/elb.log 2>&1 &
for _ in $(seq 120); do curl -s -o /dev/null http://127.0.0.1:9000/ && break; sleep 0.5; done
export AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any AWS_REGION=us-east-1
# The server's RDMA GID is not its endpoint's address (the lane shows both sides of that).
export HIPOBJ_ALLOW_PEER_GID=192.0.2.1
rdma=(--endpoint-url http://127.0.0.1:9000 --nic-hint rxe0 --require-rdma)

t0=$(date +%s.%N)
if $H get "${rdma[@]}" s3://bkt/big $D/out 2>$S/get.err; then
    t1=$(date +%s.%N)
    pass "GET of $SIZE bytes with --require-rdma ($(echo "$t1 - $t0" | bc) s)"
else
    t1=$(date +%s.%N)
    fail "GET of $SIZE bytes ($(echo "$t1 - $t0" | bc) s): $(tail -5 $S/get.err)"
fi
grep -q 'plain HTTP' $S/get.err && fail "the GET fell back to plain HTTP" || pass "no fallback to plain HTTP"
# Each hipobj-rc-v2 GET session: "RDMA GET bkt/big: N bytes (hipobj-rc-v2[, offset O])".
grep 'RDMA GET bkt/big: ' $S/elb.log | sed 's/.*: \([0-9]*\) bytes (hipobj-rc-v2.*/\1/' >$S/sessions
n=$(grep -c . $S/sessions || true)
sum=0
while read -r b; do sum=$((sum + b)); done <$S/sessions
max=$(sort -n $S/sessions | tail -1)
echo "hipobj-rc-v2 GET sessions: $n, bytes $sum, largest ${max:-0}"
[ "$sum" = "$SIZE" ] && pass "the sessions moved $sum bytes, the object's size" || fail "the sessions moved $sum bytes, not $SIZE"
[ "$n" -gt 1 ] && [ "${max:-0}" -le 2147483647 ] && pass "$n sessions, none over 2^31-1 bytes (largest $max)" ||
    fail "$n sessions, largest ${max:-0}"
grep -i 'error\|timed out\|413\|408' $S/elb.log | head -5
ls -l $D/out 2>&1

# PUT of the same file. One hipobj-rc-v2 transfer holds at most 2^31-1
# bytes and elbencho advertises no v2 parts: the CLI makes it a multipart
# upload, whose parts this server can take over plain HTTP only.
t0=$(date +%s.%N)
$H put "${rdma[@]}" $SRC s3://bkt/bigput 2>$S/put-req.err
rc=$?
t1=$(date +%s.%N)
echo "PUT with --require-rdma: exit $rc ($(echo "$t1 - $t0" | bc) s): $(cat $S/put-req.err)"
if [ $rc -ne 0 ] && [ "$(grep -c "" $S/put-req.err)" -eq 1 ] && grep -q 'hipobj-rc-v2' $S/put-req.err &&
    grep -q 'falling back to HTTP is off' $S/put-req.err; then
    pass "PUT of $SIZE bytes with --require-rdma refused in one line"
else
    fail "PUT of $SIZE bytes with --require-rdma: exit $rc, not the one-line refusal"
fi
[ ! -e $D/elb/bkt/bigput ] && pass "the refused PUT stored nothing" || fail "the refused PUT stored $(ls -l $D/elb/bkt/bigput)"
left=$(ls $D/elb/bkt/.mpu 2>/dev/null | wc -l)
[ "$left" -eq 0 ] && pass "the refused PUT's multipart upload was aborted" || fail "$left multipart uploads left"
t0=$(date +%s.%N)
if $H put --endpoint-url http://127.0.0.1:9000 --nic-hint rxe0 $SRC s3://bkt/bigput 2>$S/put.err; then
    t1=$(date +%s.%N)
    pass "PUT of $SIZE bytes without --require-rdma ($(echo "$t1 - $t0" | bc) s)"
else
    t1=$(date +%s.%N)
    fail "PUT of $SIZE bytes without --require-rdma ($(echo "$t1 - $t0" | bc) s): $(tail -3 $S/put.err)"
fi
grep -q 'plain HTTP' $S/put.err && pass "the PUT said it went over plain HTTP: $(grep -m1 'plain HTTP' $S/put.err)" ||
    fail "the PUT went over plain HTTP without saying so: $(cat $S/put.err)"
n=$(grep -c 'RDMA PUT bkt/bigput' $S/elb.log || true)
[ "$n" -eq 0 ] && pass "no hipobj-rc-v2 PUT session at the server" || fail "$n hipobj-rc-v2 PUT sessions"
ls -l $D/elb/bkt/bigput 2>&1
finish
EOF
chmod a+r "$inner"
start=$(date +%s)
out=$(RXE_VM_DISK=$disk RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-3600} \
    scripts/rxe-vm.sh /bin/bash "$inner" 2>&1 | tee /dev/stderr) || true
echo "rxe-rc-v2-large: VM and all $(($(date +%s) - start)) s"
checks=$(sed -n 's/^CHECKS \([0-9]*\) FAILED.*/\1/p' <<<"$out" | tail -1)
failed=$(sed -n 's/^CHECKS [0-9]* FAILED \([0-9]*\).*/\1/p' <<<"$out" | tail -1)
[[ -n $checks ]] || { echo "RCV2-LARGE: FAIL (the VM reported no result)"; exit 1; }

# The GET's bytes, read off the disk here.
rm -f "$dir/out"
debugfs -R "dump /out $dir/out" "$disk" 2>/dev/null || true
got=$(sha256sum "$dir/out" 2>/dev/null | cut -d' ' -f1)
checks=$((checks + 1))
if [[ $got == "$want" ]]; then
    echo "PASS sha256 of the GET equals the object's ($want)"
else
    failed=$((failed + 1))
    echo "FAIL sha256 of the GET ${got:-(no file)} is not the object's $want"
fi
rm -f "$dir/out"
debugfs -R "dump /elb/bkt/bigput $dir/out" "$disk" 2>/dev/null || true
got=$(sha256sum "$dir/out" 2>/dev/null | cut -d' ' -f1)
checks=$((checks + 1))
if [[ $got == "$want" ]]; then
    echo "PASS sha256 of the object the PUT stored equals the input's"
else
    failed=$((failed + 1))
    echo "FAIL sha256 of the object the PUT stored ${got:-(no file)} is not the input's $want"
fi
rm -f "$dir/out" "$disk"
if [[ $failed == 0 ]]; then
    echo "RCV2-LARGE: PASS ($checks checks)"
    exit 0
fi
echo "RCV2-LARGE: FAIL ($failed of $checks checks failed)"
exit 1
