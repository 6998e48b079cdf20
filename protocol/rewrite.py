"""Response rewriters: broker addresses (Metadata, FindCoordinator, DescribeCluster, the
``NodeEndpoints`` tag of Fetch v16+ / Produce v10+, the ``NodeEndpoints`` array of ShareFetch
and ShareAcknowledge) and ApiVersions capping.

Rewrites splice: new bytes for the changed fields, original bytes for everything else, so
unknown tagged fields and trailing bytes survive. A frame that needs no change yields
``None`` and is forwarded untouched. Must never: do I/O or pick ports (``Advertise`` does).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from . import apis
from .encoder import encode, is_default
from .errors import DecodeError
from .events import BrokerAddress
from .headers import response_body_start
from .primitives import I16, I32, Buf, encode_string, encode_uvarint, read_fixed
from .schema import FieldSpec, load
from .walker import Struct, walk

# The highest version of each API this codec decodes; ApiVersions responses are capped to it
# so clients never pick a version the proxy cannot rewrite or observe. One table, tested
# against the bundled specs.
CODEC_MAX_VERSION: Final[dict[int, int]] = {
    apis.PRODUCE: 13,
    apis.FETCH: 18,
    apis.METADATA: 13,
    apis.FIND_COORDINATOR: 6,
    apis.SASL_HANDSHAKE: 1,
    apis.API_VERSIONS: 5,  # Kafka 4.4: v5 (same response as v4)
    apis.SASL_AUTHENTICATE: 2,
    apis.DESCRIBE_CLUSTER: 2,
    apis.SHARE_FETCH: 2,  # KIP-932: Kafka 4.4 speaks v1-v2
    apis.SHARE_ACKNOWLEDGE: 2,
}

UNSUPPORTED_VERSION: Final = 35
ENDPOINT_TYPE_CONTROLLER: Final = 2

# node_id, real host, real port -> the address clients must use instead (None: leave as is)
Advertise = Callable[[int, str, int], "tuple[str, int] | None"]

Splice = tuple[int, int, bytes]  # replace buf[start:end] with bytes


def apply_splices(buf: Buf, start: int, end: int, splices: Iterable[Splice]) -> bytes:
    parts: list[bytes | memoryview] = []
    view = memoryview(buf)
    pos = start
    for s, e, new in sorted(splices, key=lambda x: x[0]):
        parts.append(view[pos:s])
        parts.append(new)
        pos = e
    parts.append(view[pos:end])
    return b"".join(parts)


@dataclass(slots=True)
class RewriteResult:
    body: bytes | None  # the new frame (without size prefix), or None: forward untouched
    learned: list[BrokerAddress] = field(default_factory=list)
    topic_ids: list[tuple[str, uuid.UUID]] = field(default_factory=list)
    leaders: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, leader node

    def __init__(self, body: bytes | None, learned: list[BrokerAddress] | None = None,
                 topic_ids: list[tuple[str, uuid.UUID]] | None = None,
                 leaders: list[tuple[str, int, int]] | None = None) -> None:  # compiled natively
        self.body = body
        self.learned = [] if learned is None else learned
        self.topic_ids = [] if topic_ids is None else topic_ids
        self.leaders = [] if leaders is None else leaders


def _broker_splices(
    entries: Iterable[Struct], node_f: str, flexible: bool, advertise: Advertise,
    learned: list[BrokerAddress],
) -> list[Splice]:
    out: list[Splice] = []
    for e in entries:
        node_id, host, port = e[node_f], e["Host"], e["Port"]
        if node_id < 0 or host is None:
            continue  # "no coordinator" / error placeholders are left alone
        learned.append(BrokerAddress(node_id=node_id, host=host, port=port, rack=e.get("Rack")))
        new = advertise(node_id, host, port)
        if new is None or new == (host, port):
            continue
        hs, he = e.spans["Host"]
        ps, pe = e.spans["Port"]
        out.append((hs, he, encode_string(new[0], flexible)))
        out.append((ps, pe, I32.pack(new[1])))
    return out


def _tagged_splices(msg: Struct, name: str, buf: Buf, inner: list[Splice]) -> list[Splice]:
    """Splices inside a tagged field change its size prefix: re-wrap the whole tag entry."""
    if not inner:
        return []
    for entry in msg.tags:
        if entry.name == name:
            value = apply_splices(buf, entry.value_start, entry.end, inner)
            return [(entry.start, entry.end, encode_uvarint(entry.tag) + encode_uvarint(len(value)) + value)]
    raise DecodeError(f"tag entry {name} not found")


# Rewrites of the small, repetitive responses (every connection's ApiVersions, the periodic
# Metadata refresh) are remembered by their bytes after the correlation id: a repeat costs a
# hash instead of a walk and re-encode (190 us for ApiVersions, ~2 ms for a 20-topic Metadata).
CACHED_APIS: Final = frozenset({apis.API_VERSIONS, apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER})
CACHE_ENTRIES: Final = 64
CACHE_MAX_FRAME_BYTES: Final = 256 << 10


class ResponseRewriter:
    """Decides which responses must be held whole, and rewrites them."""

    def __init__(self, advertise: Advertise | None, *, cap_versions: bool = True) -> None:
        self.advertise = advertise
        self.cap_versions = cap_versions
        self._cache: dict[tuple[int, int, bytes], RewriteResult] = {}

    def wants(self, api_key: int, api_version: int) -> bool:
        if api_key == apis.API_VERSIONS:
            return self.cap_versions
        if self.advertise is None:
            return False
        if api_key in (apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER):
            return True
        if api_key == apis.FETCH:
            return api_version >= 16
        if api_key == apis.PRODUCE:
            return api_version >= 10
        return api_key in (apis.SHARE_FETCH, apis.SHARE_ACKNOWLEDGE)

    def rewrite(self, api_key: int, api_version: int, frame: Buf) -> RewriteResult:
        """``frame`` is a whole response without its size prefix (it starts with the
        correlation id, which the rewrite never changes)."""
        if api_key not in CACHED_APIS or len(frame) > CACHE_MAX_FRAME_BYTES:
            return self._rewrite(api_key, api_version, frame)
        key = (api_key, api_version, bytes(frame[4:]))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._rewrite(api_key, api_version, frame)
            if len(self._cache) >= CACHE_ENTRIES:
                del self._cache[next(iter(self._cache))]  # the oldest
            self._cache[key] = hit
            return hit
        body = None if hit.body is None else bytes(frame[:4]) + hit.body[4:]
        return RewriteResult(body, list(hit.learned), list(hit.topic_ids), list(hit.leaders))

    def _rewrite(self, api_key: int, api_version: int, frame: Buf) -> RewriteResult:
        if api_key == apis.API_VERSIONS:
            return RewriteResult(cap_api_versions(api_version, frame))
        body = response_body_start(api_key, api_version, frame)
        api = apis.table()[api_key]
        msg = walk(api.response(), api_version, frame, body)
        flexible = api_version in api.response_flexible
        learned: list[BrokerAddress] = []
        adv = self.advertise
        if adv is None:
            return RewriteResult(None)
        splices: list[Splice] = []
        topic_ids: list[tuple[str, uuid.UUID]] = []
        leaders: list[tuple[str, int, int]] = []
        if api_key == apis.METADATA:
            splices = _broker_splices(msg["Brokers"] or [], "NodeId", flexible, adv, learned)
            for t in msg["Topics"] or []:
                tid = t.get("TopicId")
                if tid is not None and tid.int != 0 and t["Name"] is not None:
                    topic_ids.append((t["Name"], tid))
            leaders = metadata_leaders(msg)
        elif api_key == apis.FIND_COORDINATOR:
            if api_version >= 4:
                splices = _broker_splices(msg["Coordinators"] or [], "NodeId", flexible, adv, learned)
            else:
                splices = _broker_splices([msg], "NodeId", flexible, adv, learned)
        elif api_key == apis.DESCRIBE_CLUSTER:
            if msg.get("EndpointType", 1) != ENDPOINT_TYPE_CONTROLLER:
                splices = _broker_splices(msg["Brokers"] or [], "BrokerId", flexible, adv, learned)
        elif api_key in (apis.SHARE_FETCH, apis.SHARE_ACKNOWLEDGE):  # an array, not a tag
            splices = _broker_splices(msg["NodeEndpoints"] or [], "NodeId", flexible, adv, learned)
        else:  # Fetch v16+ / Produce v10+: the top-level NodeEndpoints tag
            endpoints = msg.get("NodeEndpoints") or []
            inner = _broker_splices(endpoints, "NodeId", True, adv, learned)
            splices = _tagged_splices(msg, "NodeEndpoints", frame, inner)
        if not splices:
            return RewriteResult(None, learned, topic_ids, leaders)
        return RewriteResult(apply_splices(frame, 0, len(frame), splices), learned, topic_ids, leaders)


def metadata_leaders(msg: Struct) -> list[tuple[str, int, int]]:
    """(topic, partition, leader node) of every partition a walked Metadata response names."""
    return [(t["Name"], p["PartitionIndex"], p["LeaderId"]) for t in msg["Topics"] or []
            if t["Name"] and t["ErrorCode"] == 0 for p in t["Partitions"] or []]


def _api_versions_changes(msg: Struct, fields: tuple[FieldSpec, ...], version: int) -> bool:
    changed = False
    for entry in msg.get("ApiKeys") or []:
        cap = CODEC_MAX_VERSION.get(entry["ApiKey"])
        if cap is not None and entry["MaxVersion"] > cap >= entry["MinVersion"]:
            entry.values["MaxVersion"] = cap
            changed = True
    by_name = {f.name: f for f in fields}
    for tag in msg.tags:
        if tag.name is not None and is_default(by_name[tag.name], msg.values[tag.name]):
            changed = True  # re-encoding drops it, as Java Kafka never sends it
    return changed


def cap_api_versions(api_version: int, frame: Buf) -> bytes | None:
    """Cap advertised maxima to CODEC_MAX_VERSION and drop default-valued tags.

    ApiVersions responses always use header v0. A broker that does not support the
    requested version answers UNSUPPORTED_VERSION in the v0 layout (KIP-511)."""
    spec = load("ApiVersionsResponse")
    version = api_version
    try:
        msg = walk(spec, version, frame, 4)
    except DecodeError:
        code, _ = read_fixed(I16, frame, 4)
        if code != UNSUPPORTED_VERSION:
            raise
        version = 0
        msg = walk(spec, version, frame, 4)
    if not _api_versions_changes(msg, spec.fields, version):
        return None
    tail = bytes(frame[msg.end:])  # trailing bytes are kept as they were
    return bytes(frame[:4]) + encode(spec, version, msg, frame) + tail
