#!/usr/bin/env bash
# The Python package (python/, docs/python.md): build the abi3 wheel with
# maturin from PyPI, install it into a fresh venv, and run its pytest suite
# against hipobj-server on the soft RoCE NIC; then the checkpoint example at
# a small size. Fails on any failed, erroring or missing test.
#
# The venv lives in $HIPOBJ_PY_VENV (default /tmp/hipobj-py-venv). The
# wheel is built with the dev profile so that it reuses the workspace's
# debug build (the soft NIC is optimised even there); `maturin build
# --release` makes the wheel to ship.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${HIPOBJ_PY_VENV:-/tmp/hipobj-py-venv}"
work="$(mktemp -d /tmp/hipobj-py.XXXXXX)"
trap 'rm -rf "$work"' EXIT

if ! "$venv/bin/python" -c 'import maturin, numpy, pytest, boto3' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'maturin>=1.5,<2' numpy pytest boto3
fi
py="$venv/bin/python"

cargo build -q -p hipobj-server
export HIPOBJ_SERVER_BIN="$CARGO_TARGET_DIR/debug/hipobj-server"

# The wheel: one abi3 wheel for CPython 3.9 and later.
"$venv/bin/maturin" build -q --profile dev -m python/Cargo.toml -o "$work/wheels"
wheel="$(ls "$work"/wheels/hipobj-*.whl)"
case "$wheel" in
    *-cp39-abi3-*) echo "built $(basename "$wheel")" ;;
    *) echo "FAIL: $wheel is not an abi3 wheel for cp39+" >&2; exit 1 ;;
esac
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"

# Run from the tests' folder, so `import hipobj` is the installed wheel and
# not the source tree.
set +e
(cd python/tests && "$py" -m pytest -q -p no:cacheprovider -rfEs .)
rc=$?
set -e
case $rc in
    0) ;;
    5) echo "FAIL: pytest collected no tests" >&2; exit 1 ;;
    *) echo "FAIL: pytest exited with $rc" >&2; exit "$rc" ;;
esac

# The checkpoint example, small: write tensors by RDMA PUT, load them back
# with ranged RDMA GETs into one registered buffer, compare, print the table.
"$py" python/examples/checkpoint.py --size-mib 16
