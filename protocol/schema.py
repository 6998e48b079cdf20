"""Kafka's JSON message specs, loaded into immutable field trees.

The specs in ``specs/`` are Apache Kafka's own files (newer Kafka 4.1-era ones supersede the
older ones). This module owns reading them and answering "which fields exist in version v,
which are tagged, which versions are flexible". Must never: decode bytes (see ``walker``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from .errors import SpecError

MAX_VERSION = 0x7FFF


@dataclass(frozen=True, slots=True)
class Versions:
    lo: int
    hi: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return Versions(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))


NO_VERSIONS = Versions(1, 0)

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
     "string", "bytes", "records", "uuid"}
)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: str  # a primitive name, or "struct"
    is_array: bool
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    flexible_override: Versions | None  # a field's own "flexibleVersions" (ClientId: none)
    fields: tuple[FieldSpec, ...]
    default: Any

    def present(self, version: int) -> bool:
        return version in self.versions or (self.tag is not None and version in self.tagged)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged


@dataclass(frozen=True, slots=True)
class MessageSpec:
    name: str
    api_key: int | None
    kind: str  # request | response | header | data
    valid: Versions
    flexible: Versions
    fields: tuple[FieldSpec, ...]


def _parse_default(type_: str, raw: Any) -> Any:
    if raw is None:
        return None
    if isinstance(raw, bool | int):
        return raw
    text = str(raw).strip()
    if text == "null":
        return None
    if type_ == "bool":
        return text.lower() == "true"
    if type_ in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(text, 0) if text else 0
    if type_ == "float64":
        return float(text) if text else 0.0
    return text


def _field(raw: dict[str, Any], common: dict[str, dict[str, Any]]) -> FieldSpec:
    type_text: str = raw["type"]
    is_array = type_text.startswith("[]")
    base = type_text[2:] if is_array else type_text
    sub: tuple[FieldSpec, ...] = ()
    if base not in PRIMITIVES:
        sub_raw = raw.get("fields")
        if sub_raw is None:
            if base not in common:
                raise SpecError(f"field {raw['name']}: unknown type {base}")
            sub_raw = common[base]["fields"]
        sub = tuple(_field(f, common) for f in sub_raw)
        base = "struct"
    flex = raw.get("flexibleVersions")
    return FieldSpec(
        name=raw["name"],
        type=base,
        is_array=is_array,
        versions=Versions.parse(raw.get("versions")),
        nullable=Versions.parse(raw.get("nullableVersions")),
        tag=raw.get("tag"),
        tagged=Versions.parse(raw.get("taggedVersions")),
        flexible_override=Versions.parse(flex) if flex is not None else None,
        fields=sub,
        default=_parse_default(base, raw.get("default")),
    )


_COMMENT = re.compile(r"^\s*//.*$", re.M)


@cache
def load(name: str) -> MessageSpec:
    """Load one spec by its file name without ``.json`` (e.g. ``"FetchResponse"``)."""
    try:
        text = resources.files("fetchlat.protocol").joinpath("specs", f"{name}.json").read_text()
    except FileNotFoundError as exc:
        raise SpecError(f"no bundled spec named {name}") from exc
    data = json.loads(_COMMENT.sub("", text))
    common = {c["name"]: c for c in data.get("commonStructs", [])}
    return MessageSpec(
        name=data["name"],
        api_key=data.get("apiKey"),
        kind=data["type"],
        valid=Versions.parse(data.get("validVersions")),
        flexible=Versions.parse(data.get("flexibleVersions")),
        fields=tuple(_field(f, common) for f in data["fields"]),
    )


@cache
def all_specs() -> dict[str, MessageSpec]:
    out: dict[str, MessageSpec] = {}
    for entry in resources.files("fetchlat.protocol").joinpath("specs").iterdir():
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = load(entry.name[:-5])
    return out
