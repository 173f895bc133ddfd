"""Exceptions and warnings of the hipobj package.

Every failure is a :class:`HipObjError` with ``code`` (the
``hipObjOpError_t`` value), ``name`` (its C name), and what the S3 server
said when it answered with an error: ``status`` (the HTTP status),
``s3_code`` (``NoSuchKey``, ``AccessDenied``, ...) and ``declined`` (the
server declined RDMA and falling back was off); each is ``None`` /
``False`` where nothing said otherwise. S3 errors that Python programs
already handle by kind are also the matching built-in exception:
:class:`NoSuchKey` and :class:`NoSuchBucket` are ``FileNotFoundError``,
:class:`AccessDenied` is a ``PermissionError``.
"""

from typing import Optional

from ._native import HipObjError

__all__ = [
    "AccessDenied",
    "CODES",
    "HipObjError",
    "NoSuchBucket",
    "NoSuchKey",
    "RdmaFallbackWarning",
    "error",
    "make",
]

# hipObjOpError_t, in the header's order (include/hipobj.h).
CODES = {
    "hipObjInvalidValue": 1,
    "hipObjNotInitialized": 2,
    "hipObjAlreadyInitialized": 3,
    "hipObjRdmaError": 4,
    "hipObjS3Error": 5,
    "hipObjBufNotRegistered": 6,
    "hipObjBufAlreadyRegistered": 7,
    "hipObjNicNotFound": 8,
    "hipObjDmabufNotSupported": 9,
    "hipObjSizeTooLarge": 10,
    "hipObjInternalError": 11,
    "hipObjBusy": 12,
}

# The defaults of the attributes the stubs declare, as class attributes, so
# that every instance has them however it was made (even by
# ``HipObjError("...")`` in a program's own code).
HipObjError.code = CODES["hipObjInternalError"]
HipObjError.name = "hipObjInternalError"
HipObjError.status = None
HipObjError.s3_code = None
HipObjError.declined = False


class NoSuchKey(HipObjError, FileNotFoundError):
    """The object does not exist (S3 ``NoSuchKey``, or a 404 with no body, as HEAD gives)."""


class NoSuchBucket(HipObjError, FileNotFoundError):
    """The bucket does not exist."""


class AccessDenied(HipObjError, PermissionError):
    """The server refused the credentials or the request (HTTP 403)."""


for _c in (NoSuchKey, NoSuchBucket, AccessDenied):
    _c.__module__ = "hipobj"

# S3 error codes that mean the caller may not do this.
_DENIED = {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "ExpiredToken"}


class RdmaFallbackWarning(UserWarning):
    """The server declined RDMA; the bytes moved over plain HTTP instead."""


RdmaFallbackWarning.__module__ = "hipobj"


def _class_for(status: Optional[int], s3_code: Optional[str]) -> type:
    if s3_code == "NoSuchBucket":
        return NoSuchBucket
    if s3_code in ("NoSuchKey", "NotFound") or (s3_code is None and status == 404):
        return NoSuchKey
    if s3_code in _DENIED or (s3_code is None and status == 403):
        return AccessDenied
    return HipObjError


def make(
    code: int,
    name: str,
    message: str,
    status: Optional[int] = None,
    s3_code: Optional[str] = None,
    declined: bool = False,
) -> HipObjError:
    """The exception for a failure (the extension module raises what this returns)."""
    e = _class_for(status, s3_code)(message)
    e.code = code
    e.name = name
    e.status = status
    e.s3_code = s3_code
    e.declined = declined
    return e


def error(name: str, message: str, **s3: object) -> HipObjError:
    """A HipObjError with the code of the C name ``name`` (and S3's ``status``, ``s3_code``)."""
    return make(CODES[name], name, message, **s3)  # type: ignore[arg-type]
