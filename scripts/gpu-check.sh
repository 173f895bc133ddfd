#!/usr/bin/env bash
# Checks hipobj-gpu's CUDA backend on a machine with an NVIDIA GPU and its
# driver (libcuda.so.1; no CUDA toolkit needed). Builds the gpu_check
# example of hipobj-system (the crate that joins the core to the backends)
# and runs it; every output line is labeled (== section, INFO,
# PASS, FAIL, RESULT). Exit status: the check's (0 only if all passed).
#
#   scripts/gpu-check.sh            build (release) and run
#   scripts/gpu-check.sh --prepare  build here and copy the binary to
#                                   target-gpu-check/gpu_check, for a device
#                                   machine without cargo or crates: carry
#                                   target-gpu-check and run this script there
#
# On a device machine cargo builds --offline first (it usually has no
# network), then online; if neither works it runs target-gpu-check/gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."

prebuilt=target-gpu-check/gpu_check
target_dir=${CARGO_TARGET_DIR:-target}
built=$target_dir/release/examples/gpu_check
build=(build --release -p hipobj-system --example gpu_check)

if [ "${1:-}" = "--prepare" ]; then
    cargo "${build[@]}" || exit 1
    mkdir -p target-gpu-check && cp "$built" "$prebuilt" && echo "prepared $prebuilt"
    exit 0
fi

echo "== host"
echo "INFO  kernel: $(uname -srm)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv,noheader 2>&1 |
        sed 's/^/INFO  nvidia-smi: /'
else
    echo "INFO  nvidia-smi: not installed"
fi
ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' | sed 's/^[[:space:]]*/INFO  ldconfig: /' ||
    echo "INFO  ldconfig: no libcuda.so in the cache"
for m in nvidia nvidia_peermem; do
    if [ -d "/sys/module/$m" ]; then echo "INFO  module $m: loaded"; else echo "INFO  module $m: not loaded"; fi
done

echo "== build"
bin=""
mkdir -p "$target_dir"
start=$(date +%s)
if command -v cargo >/dev/null 2>&1; then
    if timeout 100 cargo "${build[@]}" --offline -q 2>"$target_dir/gpu-check-offline.log"; then
        bin=$built
    elif timeout 100 cargo "${build[@]}" -q 2>"$target_dir/gpu-check-online.log"; then
        bin=$built
    else
        echo "INFO  cargo build failed ($target_dir/gpu-check-*.log):"
        tail -n 5 "$target_dir"/gpu-check-*.log 2>/dev/null | sed 's/^/INFO    /'
    fi
else
    echo "INFO  cargo: not installed"
fi
if [ -z "$bin" ] && [ -x "$prebuilt" ]; then
    echo "INFO  using the prebuilt $prebuilt"
    bin=$prebuilt
fi
if [ -z "$bin" ]; then
    echo "RESULT FAIL (no gpu_check binary: cargo could not build it, and $prebuilt is absent)"
    exit 3
fi
echo "INFO  build: $(($(date +%s) - start)) s, $bin"

echo "== check"
timeout 90 "$bin"
rc=$?
[ "$rc" = 124 ] && echo "RESULT FAIL (gpu_check ran past 90 s)"
exit "$rc"
