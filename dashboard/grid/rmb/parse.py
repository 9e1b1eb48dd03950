"""What rmb-peer hands back, read as strictly as the Grid Proxy's answers (grid.proxy.parse).

An answer on our reply queue is `{"ver": 1, "ref", "dat": base64(JSON), "src": "<twin>", "shm",
"now", "err": null | {"code", "message"}}` (threefoldtech/rmb-rs docs/readme.md). `src` is the sender's
address as rmb-rs writes it (src/types/mod.rs `stringify`): "<twin>", or "<twin>:<connection>" when the
sender named a connection; "" only on our own peer's answer that the call could not be delivered
(src/peer/postman.rs `undeliverable`: the call's `ref`, `now` 0, an `err`). Everything in it
comes from another party: the envelope is bounded before it is decoded, the body after, and every
refusal is a MalformedPayload (or RmbRefused for an `err`) whose words name the node and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from dashboard.capacity import pools_match_total
from dashboard.grid.proxy.parse import describe, parse_statistics
from dashboard.grid.text import text_printable, text_problem
from dashboard.grid.types import (
    MAX_NODE_HRU,
    MAX_NODE_SRU,
    MAX_POOLS,
    MalformedPayload,
    NodeStatistics,
    PoolMetrics,
    RmbRefused,
    RmbUndelivered,
    ZosVersion,
)

# A pools answer of 64 pools is a few KiB; a statistics one less. Past this an answer is not a node's.
MAX_ANSWER_BYTES = 256 * 1024
POOL_TYPES = ("ssd", "hdd")
_NAME_MAX = 128
_VERSION_MAX = 128


@dataclass(frozen=True)
class Envelope:
    """One answer taken off the reply queue: whose call it answers, who sent it, its body or error."""

    ref: str
    src: int | None  # the sender's twin; None on the peer's "could not deliver" answer
    body: Any  # the decoded JSON of `dat` (None when `err` is set)
    err_code: int | None = None
    err_message: str = ""
    # Why `dat` could not be read ("" when it was): the envelope names its call, so the call is told.
    problem: str = ""


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def json_read(raw: bytes | str, *, what: str) -> Any:
    """Strict JSON as rmb-peer (serde_json) writes it: no NaN or Infinity, and no nesting deeper than
    Python's stack (a RecursionError, from a few KiB of brackets, must not escape the door)."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise MalformedPayload(f"{what} with JSON nested deeper than rmb-peer ever sends") from None
    except ValueError as exc:  # UnicodeDecodeError is one: bytes that are not UTF-8
        raise MalformedPayload(f"{what} that is not JSON ({text_printable(exc, 80)})") from None


def parse_envelope(raw: bytes | str) -> Envelope:
    """The answer's envelope; MalformedPayload when it is not one rmb-peer would send."""
    if len(raw) > MAX_ANSWER_BYTES:
        raise MalformedPayload(
            f"an answer of {len(raw)} bytes, more than the {MAX_ANSWER_BYTES // 1024} KiB one may be"
        )
    payload = json_read(raw, what="an answer")
    if not isinstance(payload, dict):
        raise MalformedPayload(f"an answer that is {describe(payload)}, not a JSON object")
    ref = payload.get("ref")
    if not isinstance(ref, str) or not 0 < len(ref) <= 128:
        raise MalformedPayload(f"an answer whose ref is {describe(ref)}, not the text of a call's id")
    src = _twin_of(payload.get("src"), undeliverable=payload.get("err") is not None)
    err = payload.get("err")
    if err is not None:
        if not isinstance(err, dict):
            raise MalformedPayload(f"an answer whose err is {describe(err)}, not null or {{code, message}}")
        code, message = err.get("code"), err.get("message")
        return Envelope(
            ref=ref,
            src=src,
            body=None,
            err_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            err_message=text_printable(message if isinstance(message, str) else describe(message), 200),
        )
    try:
        body = _body(payload.get("dat"))
    except MalformedPayload as exc:
        return Envelope(ref=ref, src=src, body=None, problem=str(exc))
    return Envelope(ref=ref, src=src, body=body)


def _twin_of(src: Any, *, undeliverable: bool) -> int | None:
    """The sender's twin from `src` ("<twin>" or "<twin>:<connection>", rmb-rs src/types/mod.rs
    `from_string`); None for "" with an `err`: our peer could not deliver the call."""
    if src == "" and undeliverable:
        return None
    if isinstance(src, int) and not isinstance(src, bool):
        src = str(src)
    twin = src.split(":", 1)[0] if isinstance(src, str) else src
    # ASCII digits only: "²".isdigit() is true, and int("²") fails.
    if not isinstance(twin, str) or not twin.isascii() or not twin.isdigit() or len(twin) > 10:
        raise MalformedPayload(f"an answer whose src is {describe(src)}, not a twin id")
    return int(twin)


def _body(dat: Any) -> Any:
    """The JSON `dat` holds in base64 (None when empty); MalformedPayload saying why not."""
    if not isinstance(dat, str):
        raise MalformedPayload(f"an answer whose dat is {describe(dat)}, not base64 text")
    try:
        decoded = base64.b64decode(dat, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedPayload("an answer whose dat is not base64 of JSON") from None
    return json_read(decoded, what="an answer whose dat decodes to something") if dat else None


def refusal(envelope: Envelope, *, node_id: int, twin_id: int, cmd: str) -> RmbRefused | RmbUndelivered:
    code = f" (code {envelope.err_code})" if envelope.err_code is not None else ""
    if envelope.src is None:
        return RmbUndelivered(
            f"the RMB peer could not deliver {cmd} to node {node_id} (twin {twin_id}): "
            f"{envelope.err_message or 'no message'}{code}; the node said nothing"
        )
    return RmbRefused(f"node {node_id} refused {cmd} over RMB: {envelope.err_message or 'no message'}{code}")


def parse_pools(
    body: Any, *, node_id: int, total_sru: int | None = None, what: str = "zos.storage.pools"
) -> tuple[PoolMetrics, ...]:
    """`zos.storage.pools`: `[{name, type, size, used}]` in bytes. Bounded: at most MAX_POOLS pools,
    sizes whole and within what a disk holds, `used` within `size`, names storable text; with the
    node's SSD total (the proxy's sru), a set of SSD pools adding up to more than it is refused.
    The one reader of a pool list: the node's own answer over RMB and a report of it (nodes.services.pools,
    `what` names which) go through it."""
    where = f"node {node_id} {what}"
    if not isinstance(body, list):
        raise MalformedPayload(f"{where}: the answer is {describe(body)}, must be a list of pools")
    if not body:
        raise MalformedPayload(f"{where}: no pool at all; ZOS keeps its cache in one")
    if len(body) > MAX_POOLS:
        raise MalformedPayload(f"{where}: {len(body)} pools, more than the {MAX_POOLS} a node may have")
    pools = [_pool(entry, i, where=where) for i, entry in enumerate(body)]
    if len({p.name for p in pools}) != len(pools):
        raise MalformedPayload(f"{where}: two pools have the same name")
    ssd_total = sum(p.size for p in pools if p.type == "ssd")
    if total_sru is not None and ssd_total > total_sru and not pools_match_total(ssd_total, total_sru):
        raise MalformedPayload(
            f"{where}: the SSD pools add up to {ssd_total} bytes, more than the node's SSD total of {total_sru} "
            "bytes the grid reports; not this node's pools"
        )
    return tuple(pools)


def _pool(entry: Any, i: int, *, where: str) -> PoolMetrics:
    """Pool `i` of the answer, each field checked; the words name the pool by position and name."""
    if not isinstance(entry, dict):
        raise MalformedPayload(f"{where}: pool {i} is {describe(entry)}, must be an object")
    name, kind = entry.get("name"), entry.get("type")
    if not isinstance(name, str) or not 0 < len(name) <= _NAME_MAX or text_problem(name, allow_whitespace=False):
        raise MalformedPayload(f"{where}: pool {i}'s name is not text of 1 to {_NAME_MAX} printable characters")
    name = name.strip()
    if kind not in POOL_TYPES:
        raise MalformedPayload(f"{where}: pool {i} ({name}) has type {describe(kind)}, not ssd or hdd")
    limit = MAX_NODE_SRU if kind == "ssd" else MAX_NODE_HRU
    sizes = {}
    for key in ("size", "used"):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            raise MalformedPayload(
                f"{where}: pool {i} ({name})'s {key} is {describe(value)}, must be a whole number of bytes "
                f"from 0 to {limit}"
            )
        sizes[key] = value
    if sizes["used"] > sizes["size"]:
        raise MalformedPayload(
            f"{where}: pool {i} ({name}) uses {sizes['used']} bytes of {sizes['size']}: more than it holds"
        )
    return PoolMetrics(name=name, type=kind, size=sizes["size"], used=sizes["used"])


def parse_zos_statistics(body: Any, *, node_id: int) -> NodeStatistics:
    """`zos.statistics.get`: the shape of the proxy's /nodes/{id}/statistics, read by the same parser."""
    return parse_statistics(body, node_id=node_id)


def parse_version(body: Any, *, node_id: int) -> ZosVersion:
    """`zos.system.version`: `{"zos": "<build>", "zinit": "<version>"}`."""
    where = f"node {node_id} zos.system.version"
    if not isinstance(body, dict):
        raise MalformedPayload(f"{where}: the answer is {describe(body)}, must be an object")
    texts = {}
    for key in ("zos", "zinit"):
        value = body.get(key, "" if key == "zinit" else None)
        if not isinstance(value, str) or len(value) > _VERSION_MAX or text_problem(value, allow_whitespace=False):
            raise MalformedPayload(f"{where}: {key} is not text of at most {_VERSION_MAX} printable characters")
        texts[key] = value.strip()
    if not texts["zos"]:
        raise MalformedPayload(f"{where}: zos is empty")
    return ZosVersion(zos=texts["zos"], zinit=texts["zinit"])


__all__ = [
    "MAX_ANSWER_BYTES",
    "Envelope",
    "parse_envelope",
    "parse_pools",
    "parse_version",
    "parse_zos_statistics",
    "refusal",
]
