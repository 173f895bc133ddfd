"""The examples of docs/python.md's integration sections run as written,
each in a fresh interpreter, against hipobj-server on the soft NIC (with
the AWS_* variables the text says and a bucket `docs`)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import AK, SK, ROOT, boto3_client

DOC = ROOT / "docs" / "python.md"


def snippets():
    text = DOC.read_text()
    start = text.index("## PyTorch: `hipobj.torch`")
    end = text.index("## The benchmark")
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def test_the_doc_has_examples():
    assert len(snippets()) >= 4


@pytest.mark.parametrize("i", range(4))
def test_doc_example_runs(i, rdma_server, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("fsspec")
    pytest.importorskip("safetensors")
    try:
        boto3_client(rdma_server.endpoint).create_bucket(Bucket="docs")
    except Exception:
        pass  # made by an earlier example
    code = snippets()[i]
    script = tmp_path / f"example_{i}.py"
    script.write_text(code)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": rdma_server.endpoint,
        "AWS_ACCESS_KEY_ID": AK,
        "AWS_SECRET_ACCESS_KEY": SK,
        "AWS_REGION": "us-east-1",
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        "HIPOBJ_NIC": "softroce0",
    }
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, f"example {i}:\n{code}\n--- stderr:\n{p.stderr[-3000:]}"
