"""Request and response headers (RequestHeader.json / ResponseHeader.json).

Header versions follow ``apis.request_header_version`` / ``response_header_version``.
ClientId is an int16-length string even in header v2 (its "flexibleVersions" is none).
"""

from __future__ import annotations

from dataclasses import dataclass

from .apis import request_header_version, response_header_version
from .errors import DecodeError
from .primitives import I16, I32, Buf, read_fixed, read_string
from .stream import Reader
from .stream_now import tags_now


@dataclass(slots=True, kw_only=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_start: int  # offset of the request body in the frame (after the tag buffer)

    def __init__(self, *, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body_start: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_start = body_start


def skip_tag_buffer(buf: Buf, pos: int) -> int:
    r = Reader(buf)
    r.pos = pos
    try:
        tags_now(r)
    except DecodeError:
        raise DecodeError("header tag buffer runs past the frame end") from None
    return r.pos


def parse_request_header(buf: Buf, pos: int = 0) -> RequestHeader:
    """Parse a request header at ``pos`` (the frame's first byte after the size prefix)."""
    api_key, p = read_fixed(I16, buf, pos)
    api_version, p = read_fixed(I16, buf, p)
    correlation_id, p = read_fixed(I32, buf, p)
    hv = request_header_version(api_key, api_version)
    client_id = None
    if hv >= 1:
        client_id, p = read_string(buf, p, flexible=False)
    if hv >= 2:
        p = skip_tag_buffer(buf, p)
    return RequestHeader(
        api_key=api_key, api_version=api_version, correlation_id=correlation_id,
        client_id=client_id, body_start=p,
    )


def response_body_start(api_key: int, api_version: int, buf: Buf, pos: int = 0) -> int:
    """Offset of the response body: after the correlation id and, in header v1, its tags."""
    p = pos + 4
    if response_header_version(api_key, api_version) >= 1:
        p = skip_tag_buffer(buf, p)
    return p
