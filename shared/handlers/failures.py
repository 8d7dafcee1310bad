"""A failure said in words an operator can act on, for the API, the console, health and the
orders CLI alike: what happened and where, never an exception's class, a module path or the
SDK's internals (its messages name connection pools and objects, e.g.
``HTTPConnectionPool(host=..., port=...): Max retries exceeded ... (Caused by
NewConnectionError("<urllib3.connection.HTTPConnection object at 0x...>: ..."))``).

The whole exception still goes to the log, where a developer reads it.
"""

from __future__ import annotations

import re

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

_ENDPOINT = re.compile(r"host='([^']+)', port=(\d+)")
_ERROR_CODE = re.compile(r"ErrorCode:\s*(\w+)")
# "ValueError: ..." at the start of a stored reason (CorruptRecord keeps one).
_CLASS_PREFIX = re.compile(r"^\s*[A-Za-z_]\w*(Error|Exception|Invalid)\s*:\s*")
# Python's and pydantic's phrasing that names a type: "'X' is not a valid ProcessState".
_NOT_VALID = re.compile(r"is not a valid [A-Z]\w+")


def describe(e: BaseException) -> str:
    """What went wrong with a call to a service (storage, the API), in a few words."""
    text = str(e)
    if isinstance(e, ResourceNotFoundError):
        return "does not exist"
    if isinstance(e, ClientAuthenticationError):
        return f"refused the credentials{_code(e, text)}"
    if isinstance(e, HttpResponseError):
        status = f"answered HTTP {e.status_code}" if e.status_code else "refused the request"
        return f"{status}{_code(e, text)}"
    if isinstance(e, (ServiceRequestError, ServiceResponseError, ConnectionError)):
        m = _ENDPOINT.search(text)
        where = f" at {m.group(1)}:{m.group(2)}" if m else ""
        return f"unreachable{where} (no connection, or it timed out)"
    if isinstance(e, TimeoutError):
        return "timed out"
    return "failed (the app's log has the details)"


def _code(e: HttpResponseError, text: str) -> str:
    code = getattr(e, "error_code", None)
    if not code:
        m = _ERROR_CODE.search(text)
        code = m.group(1) if m else None
    return f" ({code})" if code else ""


def without_python(reason: str) -> str:
    """A stored or relayed reason with the Python taken out: no class prefix, no type named."""
    reason = _CLASS_PREFIX.sub("", reason)
    return _NOT_VALID.sub("is not a value this version knows", reason)
