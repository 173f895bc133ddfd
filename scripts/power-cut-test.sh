#!/usr/bin/env bash
# Power cuts under hipobj-server, judged by what a real kernel keeps: the
# server runs in the QEMU VM (scripts/rxe-vm.sh) on an ext4 file system on
# a virtual disk; on the host, crates/hipobj-server/tests/power_cut.rs makes
# changes one at a time (PUTs, multipart Completes, copies, deletes,
# versions, delete markers, versioning switched, buckets created) and
# journals each acknowledgement; QEMU is killed with SIGKILL at a random
# moment, so the guest's page cache is lost as in a power cut; the VM boots
# again on the same disk, `hipobj-server scrub` must find nothing wrong, and
# the verifier checks that every acknowledged change is there and
# byte-exact, nothing half-made is visible, and every bucket keeps its
# owner and settings.
#
#   scripts/power-cut-test.sh          (HIPOBJ_POWER_CUT_ROUNDS cuts, default 3)
#
# Prints one `power-cut:` line per verification; exits non-zero on any loss.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
rounds=${HIPOBJ_POWER_CUT_ROUNDS:-3}
work=${HIPOBJ_POWER_CUT_DIR:-/var/tmp/hipobj-power-cut}
bin=$(build_workspace)
exe=$(test_exe hipobj-server power_cut)
[[ -n $exe && -x $exe ]] || { echo "power-cut: could not build the test" >&2; exit 1; }
scripts/rxe-vm.sh --prepare >&2
rm -rf "$work" && mkdir -p "$work"
truncate -s 2G "$work/disk.img"
mkfs.ext4 -q -F "$work/disk.img"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HIPOBJ_POWER_CUT_ENDPOINT=http://127.0.0.1:$port HIPOBJ_POWER_CUT_JOURNAL=$work/journal.jsonl
vm=
cut() { # SIGKILL to QEMU: no flush, no shutdown
    pkill -KILL -f "qemu-system-x86_64.*$work/disk.img" 2>/dev/null || true
    [[ -z $vm ]] || wait "$vm" 2>/dev/null || true
    vm=
}
trap cut EXIT
boot() { # N: boots the VM and waits for the server (up to 10 minutes under TCG)
    RXE_VM_DISK=$work/disk.img RXE_VM_HOSTFWD="tcp:127.0.0.1:$port-:9000" RXE_VM_TIMEOUT=1800 \
        scripts/rxe-vm.sh "$root/scripts/power-cut-guest.sh" "$bin" >"$work/vm-$1.log" 2>&1 &
    vm=$!
    for _ in $(seq 600); do
        if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
            grep -a 'SCRUB-EXIT=' "$work/vm-$1.log" || true
            if grep -aq 'SCRUB-EXIT=[1-9]' "$work/vm-$1.log"; then
                echo "power-cut: boot $1: scrub found damage:" >&2
                grep -a -B20 'SCRUB-EXIT' "$work/vm-$1.log" >&2
                return 1
            fi
            return 0
        fi
        kill -0 "$vm" 2>/dev/null || { echo "power-cut: boot $1: the VM ended" >&2; cat "$work/vm-$1.log" >&2; return 1; }
        sleep 1
    done
    echo "power-cut: boot $1: the server did not come up" >&2
    tail -50 "$work/vm-$1.log" >&2
    return 1
}
run() { # TEST [ENV...]: one ignored test of power_cut.rs, from the crate's folder
    local t=$1
    shift
    (cd crates/hipobj-server && env "$@" "$exe" --ignored --exact "$t" --nocapture --test-threads=1)
}
for r in $(seq "$rounds"); do
    boot "$r"
    if [[ $r -gt 1 ]]; then
        run power_cut_verify | grep -ao 'power-cut:.*'
    fi
    run power_cut_workload HIPOBJ_POWER_CUT_SEED="$r" >"$work/workload-$r.log" 2>&1 &
    load=$!
    sleep $((5 + RANDOM % 20))
    echo "power-cut: round $r: cut after $(grep -c '"done"' "$work/journal.jsonl" 2>/dev/null || echo 0) acknowledged changes in all" 
    cut
    wait "$load" || { echo "power-cut: round $r: the workload failed" >&2; cat "$work/workload-$r.log" >&2; exit 1; }
    grep -ao 'power-cut:.*' "$work/workload-$r.log" || true
done
boot final
run power_cut_verify | grep -ao 'power-cut:.*'
echo "power-cut: $rounds cuts, nothing lost"
