"""What a node's ZOS can deploy (the proxy's `features`) and the GPUs it reports (`num_gpu`, `gpus`).

Today's Grid Proxy sends `features` as a JSON array of strings in every node (tfgrid-sdk-go grid-proxy
pkg/types/nodes.go `Node.Features []string`; internal/explorer/converters.go writes `[]` when the
features indexer has none for the node). Proxies older than that indexer (2024-09) send no `features`.
A full ZOS node lists `ipv4` and `ip`; a ZOS-light node lists `zmachine-light` and `network-light`
and neither `ipv4` nor `ip` (pkg/types/validators.go Zos3NodesFeatures, Zos4NodesFeatures). So:
- light  = True  when the list names zmachine-light or network-light and neither ipv4 nor ip;
- light  = False when it names ipv4 or ip (the node takes a public IPv4);
- light  = None  (unknown) when `features` is absent, null, `[]`, or names neither: nobody said.
Every reader of `light` says "unknown" for None; none takes it for light or for full.

`gpus` (pkg/types/indexer.go NodeGPU: id, vendor, device, contract, and ZOS's own `vram` in MiB,
zosbase pkg/provision.go GPUInfo) is null without a resources row, `[]` without GPUs. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from dashboard.grid.proxy.answers import describe
from dashboard.grid.types import MalformedPayload, NodeGpu

# tfgrid-sdk-go 10e7b39 grid-proxy/pkg/types/validators.go, in their order.
ZOS3_FEATURES = (
    "zmount",
    "zdb",
    "volume",
    "ipv4",
    "ip",
    "gateway-name-proxy",
    "gateway-fqdn-proxy",
    "qsfs",
    "zlogs",
    "network",
    "zmachine",
    "wireguard",
    "yggdrasil",
    "mycelium",
)
ZOS4_FEATURES = (
    "zmount",
    "zdb",
    "volume",
    "gateway-name-proxy",
    "gateway-fqdn-proxy",
    "qsfs",
    "zlogs",
    "zmachine-light",
    "network-light",
    "mycelium",
)
PUBLIC_IP_FEATURES = frozenset({"ipv4", "ip"})
LIGHT_FEATURES = frozenset({"zmachine-light", "network-light"})
MAX_FEATURES = 64
MAX_NODE_GPUS = 64
_GPU_TEXT_MAX = 1024


def zos_light(features: tuple[str, ...] | None) -> bool | None:
    """ZOS-light from the node's features: True, False, or None when they do not say (see the module doc)."""
    if not features:
        return None
    named = set(features)
    if named & PUBLIC_IP_FEATURES:
        return False
    if named & LIGHT_FEATURES:
        return True
    return None


def light_words(light: bool | None) -> str:
    """How a page, a command or the API says it."""
    if light is None:
        return "not known (the Grid Proxy did not list the node's features)"
    return "ZOS-light (no public IPv4)" if light else "full ZOS"


def parse_features(payload: dict, *, where: str) -> tuple[str, ...] | None:
    """The node's features as listed, or None when the answer does not list them (absent or null)."""
    features = payload.get("features")
    if features is None:
        return None
    if not isinstance(features, list):
        raise MalformedPayload(
            f"{where}: features is {describe(features)}, must be a list of strings (today's Grid Proxy) "
            "or absent (an older one)"
        )
    if len(features) > MAX_FEATURES:
        raise MalformedPayload(f"{where}: features lists {len(features)} entries, more than {MAX_FEATURES}")
    for i, feature in enumerate(features):
        # Only the names validators.go lists decide anything; another is kept as it is, never stored.
        if not isinstance(feature, str):
            raise MalformedPayload(f"{where}: features[{i}] is {describe(feature)}, must be a feature's name")
    return tuple(features)


def parse_num_gpu(payload: dict, *, where: str) -> int:
    gpus = payload.get("num_gpu")
    if gpus is None:
        return 0
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= MAX_NODE_GPUS:
        raise MalformedPayload(f"{where}: num_gpu is {describe(gpus)}, must be a whole number 0 to {MAX_NODE_GPUS}")
    return gpus


def parse_gpus(payload: dict, *, where: str) -> tuple[NodeGpu, ...]:
    """The GPUs listed (null or absent: none listed); each refused by position and field when malformed."""
    gpus = payload.get("gpus")
    if gpus is None:
        return ()
    if not isinstance(gpus, list) or len(gpus) > MAX_NODE_GPUS:
        raise MalformedPayload(f"{where}: gpus is {describe(gpus)}, must be null or a list of at most {MAX_NODE_GPUS}")
    return tuple(_gpu(entry, where=f"{where}: gpus[{i}]") for i, entry in enumerate(gpus))


def _gpu(entry: Any, *, where: str) -> NodeGpu:
    if not isinstance(entry, dict):
        raise MalformedPayload(f"{where} is {describe(entry)}, must be an object with id, vendor, device and contract")
    texts = {}
    for key in ("id", "vendor", "device"):
        value = entry.get(key)
        if value is None:
            value = ""
        # Kept in memory for the reading, never stored: any text (a page escapes what it shows).
        if not isinstance(value, str) or len(value) > _GPU_TEXT_MAX:
            raise MalformedPayload(f"{where}.{key} is {describe(value)}, must be text of at most {_GPU_TEXT_MAX}")
        texts[key] = value
    numbers: dict[str, int | None] = {}
    for key in ("contract", "vram"):
        value = entry.get(key)
        if value is None:
            numbers[key] = 0 if key == "contract" else None
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**64 - 1:
            raise MalformedPayload(f"{where}.{key} is {describe(value)}, must be a whole number, 0 or more")
        numbers[key] = value
    return NodeGpu(**texts, contract=numbers["contract"] or 0, vram=numbers["vram"])


__all__ = [
    "LIGHT_FEATURES",
    "PUBLIC_IP_FEATURES",
    "ZOS3_FEATURES",
    "ZOS4_FEATURES",
    "light_words",
    "parse_features",
    "parse_gpus",
    "parse_num_gpu",
    "zos_light",
]
