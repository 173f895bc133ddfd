"""boto3 integration: the token goes into GetObject, PutObject and
UploadPart at signing time, and the reply header back to the library."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator, NoReturn, Optional, Tuple

from ._client import MULTIPART_THRESHOLD, PART_SIZE, Client, _Front, _warn_declined
from ._errors import CODES, HipObjError, error, make
from ._retry import ATTEMPTS, never_reached, pause, s3_code, token_retryable

_TOKEN_HEADER = "x-amz-rdma-token"
_REPLY_HEADER = "x-amz-rdma-reply"
_BYTES_HEADER = "x-amz-rdma-bytes-transferred"
_OPS = ("GetObject", "PutObject", "UploadPart")

# The token of the request this thread is sending, read by the signing hook.
_tls = threading.local()


def _add_token(request: Any, **_: Any) -> None:
    token = getattr(_tls, "token", None)
    if token is None:
        return
    request.headers[_TOKEN_HEADER] = token
    # The request carries no body: the server READs the buffer. A checksum
    # botocore computed over the empty body would not describe the object.
    for h in list(request.headers.keys()):
        low = h.lower()
        if low.startswith("x-amz-checksum-") or low in ("content-md5", "x-amz-sdk-checksum-algorithm", "x-amz-trailer"):
            del request.headers[h]
    _no_trailer(request)
    if getattr(_tls, "probe", False):
        # The probe's one byte is thrown away, and a server may send the
        # whole object's checksum beside it (`rclone serve s3` does):
        # botocore would check that against the byte and raise, and the
        # write would fail for a reason that says nothing about the server.
        request.context.get("checksum", {}).pop("response_algorithms", None)


def _no_trailer(request: Any) -> None:
    """Over https botocore may send a body aws-chunked with its checksum in
    a trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER): with no body to send,
    the request goes out as a plain empty one, signed UNSIGNED-PAYLOAD."""
    checksum = request.context.get("checksum", {})
    algorithm = checksum.get("request_algorithm")
    if not (isinstance(algorithm, dict) and algorithm.get("in") == "trailer"):
        return
    del checksum["request_algorithm"]
    request.data = b""
    for h in list(request.headers.keys()):
        low = h.lower()
        if low in ("transfer-encoding", "x-amz-decoded-content-length"):
            del request.headers[h]
        elif low == "content-encoding":
            rest = [e for e in request.headers[h].split(",") if e.strip() and e.strip() != "aws-chunked"]
            del request.headers[h]
            if rest:
                request.headers[h] = ",".join(rest)
    request.headers["Content-Length"] = "0"


class _NoResend(Exception):
    """Stops botocore from sending a request that carries a token again:
    raised from its ``needs-retry`` event with the try's answer, which
    :meth:`_Exchange.send_request` takes as botocore would have raised it."""

    def __init__(self, response: Any, caught: Optional[BaseException]):
        super().__init__("a request that carries a token is not sent twice")
        self.response = response
        self.caught = caught


def _no_resend(response: Any = None, caught_exception: Optional[BaseException] = None, **_: Any) -> None:
    """``needs-retry`` of GetObject, PutObject and UploadPart: a try that
    carried a token and failed ends the request, whatever the client's
    retry settings. The same token would go out again and one reply would
    be paired with another request's exchange (docs/protocol.md, "Retries
    of requests that carry a token"); the transfer is tried again, if at
    all, as a new call with a fresh token."""
    if getattr(_tls, "token", None) is None:
        return None
    if caught_exception is None and response is not None and response[0].status_code < 300:
        return None
    raise _NoResend(response, caught_exception)


def install(s3: Any) -> None:
    """Adds hipObject's signing hook to a boto3 S3 client, and the hook that
    keeps botocore from resending a request that carries a token (idempotent)."""
    if getattr(s3.meta, "_hipobj_hooked", False):
        return
    for op in _OPS:
        s3.meta.events.register(f"before-sign.s3.{op}", _add_token, unique_id=f"hipobj-token-{op}")
        s3.meta.events.register(f"needs-retry.s3.{op}", _no_resend, unique_id=f"hipobj-no-resend-{op}")
    s3.meta._hipobj_hooked = True


def from_client_error(op: str, e: Any, tries: int = 1) -> HipObjError:
    """A botocore ``ClientError`` as the package's error (status, S3 code,
    class); ``(after N tries)`` when it was the last of several."""
    info = e.response.get("Error", {}) or {}
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = info.get("Code")
    if code is not None and str(code).isdigit():
        code = None  # HEAD's bodiless answers: botocore puts the status there
    what = ": ".join(str(x) for x in (code, info.get("Message")) if x)
    after = f" (after {tries} tries)" if tries > 1 else ""
    err = make(CODES["hipObjS3Error"], "hipObjS3Error", f"{op} failed with HTTP {status}: {what or 'no error code'}{after}", status, code)
    err.__cause__ = e
    return err


def raise_s3(op: str, e: BaseException, tries: int = 1) -> NoReturn:
    """Raises the failure of an S3 request: a ``ClientError`` as the
    package's error, anything else (no connection) as it is."""
    from botocore.exceptions import ClientError

    if isinstance(e, ClientError):
        raise from_client_error(op, e, tries) from e
    raise e


@contextlib.contextmanager
def s3_errors(op: str) -> Iterator[None]:
    """Raises a botocore ``ClientError`` from the body as a :class:`HipObjError`."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as e:
        raise from_client_error(op, e) from e


class _Exchange:
    """One transfer's S3 side over boto3 (called by the library, maybe twice)."""

    def __init__(self, s3: Any, method: str, params: dict):
        self.s3 = s3
        self.method = method
        self.params = params
        self.status: Optional[int] = None
        self.headers: dict = {}
        self.response: Optional[dict] = None
        self.body: Optional[bytes] = None
        self.error: Optional[BaseException] = None
        # Whether any answer carried an x-amz-rdma-reply other than 501:
        # the server speaks the binding exchange.
        self.spoke = False
        # The probe's exchange ends at a 409 binding round (it answers the
        # question; no second request).
        self.probe = False

    def send_request(self, token: str) -> None:
        from botocore.exceptions import ClientError

        self.response, self.body, self.error = None, None, None
        meta: dict = {}
        _tls.token = token
        _tls.probe = self.probe
        try:
            try:
                resp = getattr(self.s3, self.method)(**self.params)
            except _NoResend as stop:
                # The try's own failure, as botocore raises it when it does
                # not retry.
                if stop.caught is not None:
                    raise stop.caught from None
                parsed = stop.response[1]
                code = (parsed.get("Error", {}) or {}).get("Code")
                op = self.s3.meta.method_to_api_mapping.get(self.method, self.method)
                raise self.s3.exceptions.from_code(code)(parsed, op) from None
            meta = resp.get("ResponseMetadata", {})
            self.response = resp
            if "Body" in resp:
                # Empty when the bytes came by RDMA; the object itself when
                # the server ignored the token (kept for the fallback).
                self.body = resp["Body"].read()
        except ClientError as e:
            meta = e.response.get("ResponseMetadata", {})
            # Kept without its traceback: the traceback's frames reach, up
            # the stack, the caller's buffer (a tensor), and this exchange
            # holding it would keep that buffer and its registration alive
            # until the next garbage collection (a probe's exchange runs
            # inside the write it probes for).
            self.error = e.with_traceback(None)
        except Exception as e:  # noqa: BLE001 - kept when it never reached the server, else raised
            if not never_reached(e):
                raise  # it broke after it went out: the library's call fails with it
            # No connection was made: the call ends for want of a reply,
            # and the transfer may run again with a fresh token.
            self.error = e.with_traceback(None)
        finally:
            _tls.token = None
            _tls.probe = False
        self.status = meta.get("HTTPStatusCode")
        self.headers = {k.lower(): v for k, v in meta.get("HTTPHeaders", {}).items()}
        reply = self.headers.get(_REPLY_HEADER)
        if reply is not None and reply.strip() and reply.split(":", 1)[0].strip() != "501":
            self.spoke = True

    def retryable(self) -> bool:
        """Whether the transfer may run again with a fresh token: its last
        request met ``503 SlowDown`` before any work, or never reached the
        server (_retry.py)."""
        return token_retryable(self.status, s3_code(self.error), self.headers.get(_REPLY_HEADER), self.error)

    def recv_reply(self) -> Optional[str]:
        if self.probe and self.headers.get(_REPLY_HEADER, "").startswith("409:"):
            return None  # an empty reply ends the library's call
        return self.headers.get(_REPLY_HEADER, "")

    def declined(self) -> Optional[str]:
        """Why the server did not do RDMA, if it declined."""
        reply = self.headers.get(_REPLY_HEADER)
        if reply is not None and reply.split(":", 1)[0] == "501":
            return "x-amz-rdma-reply 501"
        if reply is None and self.status == 501:
            return "HTTP 501"
        if reply is None and self.status is not None and 200 <= self.status < 300:
            return "the server does not speak the RDMA protocol (no x-amz-rdma-reply)"
        return None


class Boto3(_Front):
    """hipObject transfers through a boto3 S3 client the program already has.

    botocore never sends a request that carries a token twice, whatever the
    boto3 client's retry settings (a hook on its ``needs-retry`` event): the
    library does the binding round (409) itself, and a resend would pair one
    reply with another request's token. A transfer that met ``503 SlowDown``
    or no connection runs again as a new call with a fresh token, 4 tries in
    all (docs/protocol.md, "Retries of requests that carry a token"). The
    other requests (HeadObject, the multipart upload's Create, Complete and
    Abort, plain bodies) retry as the boto3 client is set to:
    ``Config(retries={"mode": "standard", "total_max_attempts": 4})`` is the
    same policy.

    ``put_from`` of more than ``multipart_threshold`` bytes is a multipart
    upload (CreateMultipartUpload, RDMA UploadParts of ``part_size``,
    CompleteMultipartUpload; AbortMultipartUpload if a part fails).

    ``extra_args`` go with every request, as boto3's own ``ExtraArgs`` do:
    ``VersionId`` (GetObject), ``ServerSideEncryption`` (PutObject and
    CreateMultipartUpload), the ``SSECustomer*`` keys (all of them; SSE-C
    needs https). Make one ``Boto3`` per object's arguments.
    """

    def __init__(
        self,
        client: Client,
        s3: Any,
        *,
        fallback: bool = True,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        extra_args: Optional[dict] = None,
    ):
        super().__init__(client, multipart_threshold, part_size)
        install(s3)
        self.s3 = s3
        extra = dict(extra_args or {})
        unknown = set(extra) - _EXTRA_ARGS
        if unknown:
            raise ValueError(f"extra_args: {sorted(unknown)} are not among {sorted(_EXTRA_ARGS)}")
        sse_c = {k: v for k, v in extra.items() if k.startswith("SSECustomer")}
        self._args = {
            "get_object": {k: v for k, v in extra.items() if k != "ServerSideEncryption"},
            "put_object": {k: v for k, v in extra.items() if k != "VersionId"},
            "create_multipart_upload": {k: v for k, v in extra.items() if k != "VersionId"},
            "upload_part": sse_c,
            "complete_multipart_upload": sse_c,
        }
        self.fallback = fallback
        # What the endpoint was found to speak before the first body-less
        # write: None (not probed yet), True (the binding exchange), or why
        # it does not (docs/protocol.md, "A token never harms a server that
        # ignores it").
        self._speaks: Any = None
        self.last_etag: Optional[str] = None
        self._tls = threading.local()  # this thread's last transfer: its ETag, and whether by RDMA

    def _transfer(self, get: bool, buf, offset, nbytes, method, params, op) -> int:
        params = {**params, **self._args[method]}

        def go(reg, at, n):
            tries = 1
            while True:
                ex = _Exchange(self.s3, method, params)
                if not get and self._speaks is not True:
                    # A PutObject or UploadPart with a token has no body: a
                    # server that ignores the token would store it empty. Probe
                    # first; a plain server gets the bytes by plain HTTP only.
                    speaks = self._speaks if self._speaks is not None else self._probe(params["Bucket"], params["Key"], op)
                    if not isinstance(speaks, _Unsure):
                        self._speaks = speaks  # an unsure answer is asked again next time
                    if speaks is not True:
                        return self._declined(get, buf, reg, at, n, method, params, ex, op, str(speaks))
                try:
                    (reg.get if get else reg.put)(at, n, ex)
                    break
                except HipObjError:
                    if ex.spoke:
                        self._proven()
                    if tries < ATTEMPTS and ex.retryable():
                        # 503 SlowDown before any work: the whole transfer
                        # again, as a new call with a fresh token (_retry.py).
                        time.sleep(pause(tries - 1))
                        tries += 1
                        continue
                    why = ex.declined()
                    if why is None:
                        if ex.error is not None and _REPLY_HEADER not in ex.headers:
                            # The S3 request itself failed (wrong secret, no such
                            # bucket or key ...): that is the error, not the
                            # missing reply the library saw next.
                            raise_s3(op, ex.error, tries)
                        raise
                    return self._declined(get, buf, reg, at, n, method, params, ex, op, why)
            self._tls.rdma = True
            self._proven()
            self.last_etag = self._tls.etag = ex.headers.get("etag")
            if get:
                got = ex.headers.get(_BYTES_HEADER)
                return int(got) if got is not None else n
            return n

        return self.client._run(buf, offset, nbytes, get, go)

    def _declined(self, get, buf, reg, at, n, method, params, ex, op, why) -> int:
        """The server declined RDMA: plain HTTP with a warning, or an error without fallback."""
        if not self.fallback:
            err = error("hipObjS3Error", f"{op}: the server declined RDMA ({why})", status=ex.status)
            err.declined = True
            raise err from None
        _warn_declined(op, why)
        self._tls.rdma = False
        with s3_errors(op):
            return self._plain(get, buf, at - (reg_off(buf, reg)), n, method, params, ex)

    def _probe(self, bucket: str, key: str, op: str) -> Any:
        """A one-byte ranged GetObject of ``key`` with a token, into a
        buffer of its own: no server stores it. True if the server speaks
        the binding exchange, else why not; an error any request would get
        (a wrong secret, no answer) is raised as the write's."""
        params = {"Bucket": bucket, "Key": key, "Range": "bytes=0-0", **self._args["get_object"]}
        for tries in range(1, ATTEMPTS + 1):
            ex = _Exchange(self.s3, "get_object", params)
            ex.probe = True

            def go(reg, at, n):
                try:
                    reg.get(at, n, ex)
                except HipObjError:
                    pass
                return 0

            self.client._run(bytearray(1), 0, 1, True, go)
            if tries == ATTEMPTS or ex.spoke or not ex.retryable():
                break
            time.sleep(pause(tries - 1))
        if ex.spoke:
            self._proven()
            return True
        why = ex.declined()
        if why is not None:
            return why
        code = ((ex.error.response.get("Error", {}) or {}).get("Code") if ex.error is not None else None)
        if ex.status in (404, 416):
            # A plain server, or one that speaks the protocol reached over a
            # connection another transfer bound to it (it then answers as
            # any S3 server would): known if a transfer proved it.
            if self.client._native.endpoint_proven(self._authority()):
                return True
            return _Unsure(f"the server did not show that it speaks the RDMA protocol (it answered a GetObject that carried a token with HTTP {ex.status} and no {_REPLY_HEADER})")
        if ex.status is not None and 400 <= ex.status < 500 and code not in _CREDENTIAL_CODES:
            return f"the server does not speak the RDMA protocol (it answered a GetObject that carried a token with HTTP {ex.status} and no {_REPLY_HEADER})"
        if ex.error is not None:
            raise_s3(op, ex.error, tries)
        raise error("hipObjS3Error", f"{op}: the server answered the probe with HTTP {ex.status}", status=ex.status)

    def _authority(self) -> str:
        """``host:port`` of the boto3 client's endpoint, as requests name it."""
        from urllib.parse import urlsplit

        return urlsplit(self.s3.meta.endpoint_url).netloc

    def _proven(self) -> None:
        """Notes that the endpoint speaks the binding exchange, for every front end of this client."""
        self._speaks = True
        self.client._native.note_endpoint_proven(self._authority())

    def _plain(self, get, buf, at, n, method, params, ex) -> int:
        mv = memoryview(buf).cast("B")
        if get:
            body = ex.body
            if body is None or ex.status == 501 or ex.headers.get(_REPLY_HEADER) is not None:
                body = getattr(self.s3, method)(**params)["Body"].read()
            if len(body) > n:
                raise error("hipObjSizeTooLarge", f"the object ({len(body)} bytes) is larger than the {n}-byte span")
            mv[at : at + len(body)] = body
            return len(body)
        p = dict(params)
        p["Body"] = bytes(mv[at : at + n])
        p["ContentLength"] = n
        resp = getattr(self.s3, method)(**p)
        self.last_etag = self._tls.etag = resp.get("ETag")
        return n

    def _head(self, bucket, key) -> dict:
        with s3_errors("HeadObject"):
            r = self.s3.head_object(Bucket=bucket, Key=key, **self._args["get_object"])
        mtime = r.get("LastModified")
        return {"size": int(r.get("ContentLength", 0)), "etag": r.get("ETag"), "mtime": mtime.timestamp() if mtime is not None else None}

    def _get(self, buf, bucket, key, offset, nbytes, range) -> int:
        params = {"Bucket": bucket, "Key": key}
        if range is not None:
            params["Range"] = range
        return self._transfer(True, buf, offset, nbytes, "get_object", params, "GetObject")

    def _put(self, buf, bucket, key, offset, n) -> int:
        params = {"Bucket": bucket, "Key": key, "Body": b"", "ContentLength": 0}
        return self._transfer(False, buf, offset, n, "put_object", params, "PutObject")

    def _create(self, bucket, key) -> str:
        with s3_errors("CreateMultipartUpload"):
            return self.s3.create_multipart_upload(Bucket=bucket, Key=key, **self._args["create_multipart_upload"])["UploadId"]

    def _part(self, buf, bucket, key, upload, number, offset, n) -> Tuple[Optional[str], bool]:
        self.upload_part_from(buf, bucket, key, upload, number, offset=offset, nbytes=n)
        return self._tls.etag, bool(self._tls.rdma)

    def _complete(self, bucket, key, upload, parts, n, rdma) -> None:
        done = [{"PartNumber": number, "ETag": etag} for number, etag in parts]
        with s3_errors("CompleteMultipartUpload"):
            resp = self.s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}, **self._args["complete_multipart_upload"])
        self.last_etag = resp.get("ETag")

    def _abort(self, bucket, key, upload) -> None:
        self.s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        with s3_errors("PutObject"):
            self.s3.put_object(Bucket=bucket, Key=key, Body=bytes(data), **self._args["put_object"])

    def get_bytes(self, bucket: str, key: str, range: Optional[str] = None) -> bytes:
        params = {"Bucket": bucket, "Key": key, **self._args["get_object"]}
        if range is not None:
            params["Range"] = range
        with s3_errors("GetObject"):
            return self.s3.get_object(**params)["Body"].read()

    def upload_part_from(self, buf: Any, bucket: str, key: str, upload_id: str, number: int, *, offset: int = 0, nbytes: Optional[int] = None) -> int:
        """UploadPart ``number`` of ``upload_id``; returns the bytes sent."""
        params = {"Bucket": bucket, "Key": key, "UploadId": upload_id, "PartNumber": number, "Body": b"", "ContentLength": 0}
        return self._transfer(False, buf, offset, nbytes, "upload_part", params, "UploadPart")


class _Unsure(str):
    """A probe's answer that does not tell (404 or 416 with no reply, on an
    endpoint no transfer proved): this write goes over plain HTTP, and the
    next one asks again."""


# S3 error codes that any request with these credentials would get.
_CREDENTIAL_CODES = {"SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "ExpiredToken"}

_EXTRA_ARGS = {"VersionId", "ServerSideEncryption", "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5"}


def reg_off(buf: Any, reg: Any) -> int:
    """How far ``buf``'s first byte lies past the registration's start."""
    from ._memory import target_of

    t = target_of(buf, for_get=False)
    return t.addr - reg.addr
