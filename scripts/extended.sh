#!/usr/bin/env bash
# The lanes that CI has no time for (its budget is 45 minutes on 2 cores,
# and these rebuild the workspace under other toolchains or flags): run
# them by hand before a release and after a change to what they cover, and
# record the result in docs/testing.md. Each lane's time is printed as it
# ends. Fails on the first failing lane.
#
#   scripts/extended.sh [LANE...]   (default: every lane below, in order)
#
# Lanes: miri, tsan, sanitizers, fuzz (FUZZ_SECONDS, default 20 a target),
# rc-v2-c (needs the hipobj-rc-v2 peers beside the checkout).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

lanes=("$@")
[[ ${#lanes[@]} -gt 0 ]] || lanes=(miri tsan sanitizers fuzz rc-v2-c)
for l in "${lanes[@]}"; do
    start=$SECONDS
    echo "extended: lane $l" >&2
    case $l in
        # Miri over the wire formats, the seams and fakes, and the core on the
        # fake platform.
        miri) scripts/miri.sh ;;
        # ThreadSanitizer over the 64-thread stress test and the transfer tests.
        tsan) scripts/tsan.sh ;;
        # ASan and UBSan on the C surface, and Valgrind over init/shutdown.
        sanitizers) scripts/sanitizers.sh ;;
        # Every cargo-fuzz target from its committed seed corpus.
        fuzz) FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh ;;
        # The C example over hipobj-rc-v2 against elbencho's s3rdma-server.
        rc-v2-c)
            HIPOBJ_PEERS_DIR=$(peers_dir)
            [[ -n $HIPOBJ_PEERS_DIR ]] || { echo "extended: no hipobj-rc-v2 peers beside the checkout" >&2; exit 1; }
            export HIPOBJ_PEERS_DIR
            scripts/rxe-rc-v2-c-test.sh
            ;;
        *) echo "extended: no lane $l (miri, tsan, sanitizers, fuzz, rc-v2-c)" >&2; exit 2 ;;
    esac
    echo "extended: lane $l took $((SECONDS - start)) s" >&2
done
