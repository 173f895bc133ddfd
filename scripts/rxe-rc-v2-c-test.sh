#!/usr/bin/env bash
# examples/c/rc-v2-object.c (the hipObjRcV2* calls driven by libcurl) against
# a hipobj-rc-v2 server we did not write: elbencho's s3rdma-server (built
# from ../shared/peers/hipobj-rc-v2 by its build.sh), both on rxe0 inside the
# rxe VM (scripts/rxe-vm.sh), through libhipobj's libibverbs backend.
#
#   scripts/rxe-rc-v2-c-test.sh [SIZE...]     default sizes: 1 4097 1048576 16777216
#
# The program runs with RCV2_TRY_BINDING=1, as an application that meets
# both kinds of server: the binding exchange is declined (501 +
# unsupported) and it switches to hipobj-rc-v2. Checks, for each size: the
# switch said, PUT over hipobj-rc-v2, the stored file equal to the input,
# GET over hipobj-rc-v2 equal to the input; then a GET of a missing object
# refused at PREPARE, a session given up after PREPARE that sends CANCEL,
# and the server's log counting one hipobj-rc-v2 transfer per transfer.
# Prints PASS/FAIL per check and "RCV2-C: PASS (N checks)".
#
# Env: HIPOBJ_PEERS_DIR, HIPOBJ_PEERS_BUILD as for rxe-rc-v2-client-test.sh;
# RXE_VM_DIR as for scripts/rxe-vm.sh. Run the VM under
# `flock /tmp/rxe-vm.lock` when others share it.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

peers_dir=$(peers_dir)
[[ -n $peers_dir ]] || { echo "rxe-rc-v2-c-test: no peers directory (set HIPOBJ_PEERS_DIR)" >&2; exit 1; }
export HIPOBJ_PEERS_BUILD=${HIPOBJ_PEERS_BUILD:-/tmp/hipobj-rc-v2-peers}
[[ -x $HIPOBJ_PEERS_BUILD/bin/s3rdma-server ]] || bash "$peers_dir/build.sh"
[[ -e /usr/include/x86_64-linux-gnu/curl/curl.h ]] || {
    echo "rxe-rc-v2-c-test: needs libcurl's headers (apt-get install libcurl4-openssl-dev)" >&2
    exit 1
}

bin=$(build_workspace)
libs=$(mktemp -d /tmp/rxe-rc-v2-c.XXXXXX)
inner=$libs/inner.sh
trap 'rm -rf "$libs"' EXIT
ln -s "$bin/libhipobj_capi.so" "$libs/libhipobj.so"
ln -s "$bin/libhipobj_capi.so" "$libs/libhipobj.so.0"
gcc -std=c99 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -pedantic -Iinclude examples/c/rc-v2-object.c \
    -L"$libs" -lhipobj -lcurl -o "$libs/rc-v2-object"

sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1 4097 1048576 16777216)

cat >"$inner" <<EOF
set -u
P=$HIPOBJ_PEERS_BUILD/bin
X=$libs/rc-v2-object
export LD_LIBRARY_PATH=$libs
SIZES="${sizes[*]}"
EOF
cat >>"$inner" <<'EOF'
S=/run/scratch
checks=0 failed=0
pass() { checks=$((checks + 1)); echo "PASS $*"; }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

mkdir -p $S/elb
$P/s3rdma-server --dir $S/elb --addr 127.0.0.1 --port 9000 --rdma-addr 192.0.2.1 --no-cuobj --verbose \
    >$S/elb.log 2>&1 &
for _ in $(seq 120); do curl -s -o /dev/null http://127.0.0.1:9000/ && break; sleep 0.5; done
curl -s -X PUT http://127.0.0.1:9000/bkt >/dev/null
export AWS_ACCESS_KEY_ID=any AWS_SECRET_ACCESS_KEY=any HIPOBJ_NIC=rxe0 RCV2_TRY_BINDING=1
ep=http://127.0.0.1:9000
transfers=0

for size in $SIZES; do
    head -c "$size" /dev/urandom >$S/in.$size
    t0=$(date +%s.%N)
    if $X put $ep bkt k$size $S/in.$size >$S/put.$size.out 2>$S/put.$size.err; then
        t1=$(date +%s.%N)
        check "PUT $size bytes over hipobj-rc-v2 ($(echo "$t1 - $t0" | bc) s)" \
            grep -q "PUT $size bytes over hipobj-rc-v2" $S/put.$size.out
        transfers=$((transfers + 1))
    else
        fail "PUT $size bytes: $(tail -3 $S/put.$size.err)"
    fi
    check "PUT $size: the binding exchange was declined and said so" grep -q 'switching to hipobj-rc-v2' $S/put.$size.out
    check "stored object of $size bytes equals the input" cmp -s $S/in.$size $S/elb/bkt/k$size
    t0=$(date +%s.%N)
    if $X get $ep bkt k$size $size $S/out.$size >$S/get.$size.out 2>$S/get.$size.err; then
        t1=$(date +%s.%N)
        check "GET $size bytes over hipobj-rc-v2 ($(echo "$t1 - $t0" | bc) s)" \
            grep -q "GET $size bytes over hipobj-rc-v2" $S/get.$size.out
        transfers=$((transfers + 1))
    else
        fail "GET $size bytes: $(tail -3 $S/get.$size.err)"
    fi
    check "GET of $size bytes equals the input" cmp -s $S/in.$size $S/out.$size
done

if $X get $ep bkt missing 100 $S/missing >$S/missing.out 2>$S/missing.err; then
    fail "a GET of a missing object succeeded"
else
    check "a missing object is refused at PREPARE: $(tail -1 $S/missing.err)" grep -q 'PREPARE: S3 error' $S/missing.err
fi
first=$(echo $SIZES | cut -d' ' -f1)
if RCV2_GIVE_UP=after-prepare $X get $ep bkt k$first $first $S/gone >$S/gone.out 2>$S/gone.err; then
    fail "a session given up after PREPARE succeeded"
else
    check "a session given up after PREPARE sends CANCEL: $(grep CANCEL $S/gone.err)" \
        grep -q 'CANCEL sent: HTTP 20[04]' $S/gone.err
fi

n=$(grep -c 'bytes (hipobj-rc-v2' $S/elb.log || true)
check "server log: $n hipobj-rc-v2 transfers, $transfers expected" test "$n" -eq "$transfers"
grep -i 'cancel' $S/elb.log | head -3
grep 'hipobj-rc-v2' $S/elb.log | head -12

if [[ $failed -eq 0 ]]; then
    echo "RCV2-C: PASS ($checks checks)"
    exit 0
fi
echo "RCV2-C: FAIL ($failed of $checks checks failed)"
tail -30 $S/elb.log
exit 1
EOF
chmod a+rx "$libs" "$libs/rc-v2-object"
chmod a+r "$inner"
scripts/rxe-vm.sh /bin/bash "$inner"
