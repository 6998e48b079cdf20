"""The table of Kafka APIs: key -> name, request/response specs, flexible versions.

Built once from the bundled specs. Owns the header-version rules (docs/proxy.md):
request header 2 if the request version is flexible else 1 (0 for ControlledShutdown v0);
response header 1 if flexible else 0, except ApiVersions which always uses 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from .schema import MessageSpec, Versions, all_specs, load

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
CONTROLLED_SHUTDOWN: Final = 7
FIND_COORDINATOR: Final = 10
SASL_HANDSHAKE: Final = 17
API_VERSIONS: Final = 18
SASL_AUTHENTICATE: Final = 36
DESCRIBE_CLUSTER: Final = 60
SHARE_FETCH: Final = 78
SHARE_ACKNOWLEDGE: Final = 79


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    valid: Versions
    request_flexible: Versions
    response_flexible: Versions

    def request(self) -> MessageSpec:
        return load(self.name + "Request")

    def response(self) -> MessageSpec:
        return load(self.name + "Response")


@cache
def table() -> dict[int, Api]:
    specs = all_specs()
    out: dict[int, Api] = {}
    for spec in specs.values():
        if spec.kind != "request" or spec.api_key is None:
            continue
        name = spec.name[: -len("Request")]
        resp = specs.get(name + "Response")
        out[spec.api_key] = Api(
            key=spec.api_key,
            name=name,
            valid=spec.valid,
            request_flexible=spec.flexible,
            response_flexible=resp.flexible if resp else spec.flexible,
        )
    return out


def api_name(key: int) -> str:
    """The spec name, or ``unknown`` for keys no spec names: a bounded label set, whatever
    a client sends."""
    api = table().get(key)
    return api.name if api else "unknown"


# each api's flexible versions, requests' then responses' (lo, hi, lo, hi), as plain ints: the header
# rules read them for every request the codec parses (a ``Versions`` is an interpreted class, whose
# fields cost a dict lookup each); filled from ``table`` at the first call
_FLEXIBLE: Final[dict[int, tuple[int, int, int, int]]] = {}


def _flexible(key: int) -> tuple[int, int, int, int] | None:
    if not _FLEXIBLE:
        for k, a in table().items():
            _FLEXIBLE[k] = (a.request_flexible.lo, a.request_flexible.hi, a.response_flexible.lo,
                            a.response_flexible.hi)
    return _FLEXIBLE.get(key)


def request_header_version(key: int, version: int) -> int:
    if key == CONTROLLED_SHUTDOWN and version == 0:
        return 0
    flexible = _flexible(key)
    if flexible is None:
        return 1
    return 2 if flexible[0] <= version <= flexible[1] else 1


def response_header_version(key: int, version: int) -> int:
    if key == API_VERSIONS:
        return 0
    flexible = _flexible(key)
    if flexible is None:
        return 0
    return 1 if flexible[2] <= version <= flexible[3] else 0
