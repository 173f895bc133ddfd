#!/usr/bin/env bash
# The Python package (python/, docs/python.md): build the abi3 wheel with
# maturin from PyPI, install it into a venv, and run its pytest suite
# (torch CPU tensors included) against hipobj-server on the soft RoCE NIC;
# then `pip install ./python` into a fresh venv through maturin's PEP 517
# backend, and the checkpoint example at a small size with that install.
# Fails on any failed, erroring or missing test.
#
# The tests cover the integrations too (hipobj.torch's DCP storage,
# safetensors and datasets; the fsspec filesystem with fsspec's abstract
# suite; the examples of docs/python.md).
#
# The venv lives in $HIPOBJ_PY_VENV (default /tmp/hipobj-py-venv); torch
# (about 5.5 GiB from PyPI, a minute or two) goes into it once, unless
# HIPOBJ_PY_TORCH=0. Both builds use the dev profile so that they reuse
# the workspace's debug build (the soft NIC is optimised even there): the
# wheel by `maturin build --profile dev`, the PEP 517 install through
# MATURIN_PEP517_ARGS. A plain `pip install ./python` builds the release
# profile, which is the same code and takes much longer here.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${HIPOBJ_PY_VENV:-/tmp/hipobj-py-venv}"
work="$(mktemp -d /tmp/hipobj-py.XXXXXX)"
trap 'rm -rf "$work"' EXIT

if ! "$venv/bin/python" -c 'import maturin, numpy, pytest, boto3' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'maturin>=1.5,<2' numpy pytest boto3
fi
# The integrations' tests (test_fsspec.py, test_safetensors.py): two small
# pure-Python / small wheels.
if ! "$venv/bin/python" -c 'import fsspec, safetensors' 2>/dev/null; then
    "$venv/bin/pip" install -q fsspec safetensors
fi
py="$venv/bin/python"
if [ "${HIPOBJ_PY_TORCH:-1}" != 0 ] && ! "$py" -c 'import torch' 2>/dev/null; then
    "$venv/bin/pip" install -q --progress-bar off torch
fi

bin=$(build_workspace)
export HIPOBJ_SERVER_BIN="$bin/hipobj-server"

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

# `pip install ./python` as the README says, into a fresh venv: pip builds
# the package in an isolated environment with maturin from PyPI (the PEP 517
# backend in pyproject.toml) and installs it with its numpy and boto3
# extras.
fresh="$work/venv"
python3 -m venv "$fresh"
MATURIN_PEP517_ARGS="--profile dev" "$fresh/bin/pip" install -q --progress-bar off './python[numpy,boto3]'
# The file list is read whole first: `grep -q` quits at its first match,
# and under pipefail the writer's SIGPIPE would fail the check.
files="$("$fresh/bin/pip" show -f hipobj)"
grep -q 'hipobj/_native.abi3.so' <<<"$files" || {
    echo "FAIL: pip install ./python installed no extension module" >&2; exit 1; }
grep -q 'hipobj/__init__.pyi' <<<"$files" || {
    echo "FAIL: pip install ./python installed no type stubs" >&2; exit 1; }

# The checkpoint example, small, on that install: write tensors by RDMA PUT
# (a multipart upload above 8 MiB), load them back with ranged RDMA GETs
# into one registered buffer, compare, print the table.
(cd "$work" && "$fresh/bin/python" "$OLDPWD/python/examples/checkpoint.py" --size-mib 16 --part-mib 8)
