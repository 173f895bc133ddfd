"""hipobj.Boto3's retries of transfers, by the rules of docs/protocol.md
("Retries of requests that carry a token"), as hipobj-s3 applies them for
hipobj.S3 (``crates/hipobj-s3/src/retry.rs``).

botocore never sends a request that carries a token twice (the
``needs-retry`` hook in _boto3.py). A transfer is run again as a new
hipObject call, so with a fresh token, only when the server cannot have
moved a byte: it answered ``503 SlowDown`` with no ``x-amz-rdma-reply``
success, or the request never reached it (no connection was made). Never
after a ``4xx``, another ``5xx`` or a connection that broke once the
request went out. 4 tries in all; the pause before retry ``n`` (from 0) is
half of ``min(5 s, 100 ms * 2^n)`` plus a random part of up to the other
half. A ``Retry-After`` is not waited for (the AWS SDKs do not either).

Requests without a token retry as the boto3 client is set to (botocore's
own retries).
"""

from __future__ import annotations

import random
from typing import Any, Optional

ATTEMPTS = 4
BASE = 0.1
CAP = 5.0


def pause(n: int) -> float:
    """Seconds to wait before retry ``n`` (0: the first retry)."""
    full = min(CAP, BASE * (2**n))
    return full / 2 + random.uniform(0, full / 2)


def never_reached(e: BaseException) -> bool:
    """Whether the request never reached the server (botocore's connect failures)."""
    try:
        from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError
    except ImportError:  # pragma: no cover - boto3 is there when Boto3 is used
        return False
    return isinstance(e, (EndpointConnectionError, ConnectTimeoutError))


def token_retryable(status: Optional[int], code: Optional[str], reply: Optional[str], error: Optional[BaseException]) -> bool:
    """Whether a transfer whose last request ended so may run again with a
    fresh token: ``503 SlowDown`` without an ``x-amz-rdma-reply`` success,
    or a request that never reached the server."""
    if error is not None and never_reached(error):
        return True
    if status != 503 or code != "SlowDown":
        return False
    return reply is None or not reply.strip().startswith("2")


def s3_code(error: Any) -> Optional[str]:
    """The S3 error code of a botocore ``ClientError`` (None for others)."""
    resp = getattr(error, "response", None)
    if not isinstance(resp, dict):
        return None
    return (resp.get("Error", {}) or {}).get("Code")
