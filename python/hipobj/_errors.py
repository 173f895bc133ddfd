"""Exceptions and warnings of the hipobj package."""

from ._native import HipObjError

__all__ = ["HipObjError", "RdmaFallbackWarning", "CODES", "error"]

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


class RdmaFallbackWarning(UserWarning):
    """The server declined RDMA; the bytes moved over plain HTTP instead."""


def error(name: str, message: str) -> HipObjError:
    """A HipObjError with the code of the C name ``name``."""
    e = HipObjError(message)
    e.code = CODES[name]
    e.name = name
    return e
