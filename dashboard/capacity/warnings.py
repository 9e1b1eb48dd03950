"""Node warnings: the node looks free, but a deploy there may fail for a reason its figures do not show.

A closure (capacity.closures) says a node offers nothing; a warning says it offers slices that a deploy can
still stumble on, and why, so the fleet page and placement name it beside the node. The same seam as the
closures: each reason is ONE entry of `WARNING_REASONS` with its key, label, sentence and the pure
function that decides it from `WarningFacts` (filled by dashboard.figures.warning from the node's row and
the settings). A new entry shows on the fleet page, placement, the CSV and the API with no other edit.

- `cache-small`: the zos-cache's quota (as the node's pools told it) is below the full-VM image the
  marketplace deploys (FULL_VM_IMAGE_SRU): a full VM's image is read through the cache, and one larger
  than the cache's room fails with `failed to mount flist ... disk quota exceeded` until the cache grows
  (5 GiB when 60% full, checked every 5 min: zosbase checkAndResizeCache; zos#2147, a full Ubuntu 22.04
  VM refused on a node whose cache was 10 GiB).
- `grace-contracts`: node contracts in their grace period (their twin could not pay) still hold their
  VMs' memory and disk until they are paid or cancelled (the Grid Proxy counts Created and GracePeriod
  contracts in `used`); the slice audit reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dashboard.capacity.sizes import format_size


@dataclass(frozen=True)
class WarningFacts:
    """What decides a node's warnings, as plain values (dashboard.figures.warning fills them)."""

    cache_quota: int | None = None  # the zos-cache's quota the pools told; None: not known
    full_vm_image: int = 0  # the largest full-VM image the marketplace deploys, bytes; 0: not judged
    grace_contracts: int | None = None  # node contracts in GracePeriod holding capacity, as last read


@dataclass(frozen=True)
class WarningReason:
    key: str
    label: str  # short words: "zos-cache below a full VM's image"
    words: str  # a sentence about the node, with {detail}
    decide: Callable[[WarningFacts], str | None]  # the detail when it holds, None when not


def _cache_small(facts: WarningFacts) -> str | None:
    if not facts.full_vm_image or facts.cache_quota is None or facts.cache_quota >= facts.full_vm_image:
        return None
    return f"{format_size(facts.cache_quota)} < {format_size(facts.full_vm_image)}"


def _grace(facts: WarningFacts) -> str | None:
    return str(facts.grace_contracts) if facts.grace_contracts else None


WARNING_REASONS: dict[str, WarningReason] = {
    r.key: r
    for r in (
        WarningReason(
            key="cache-small",
            label="zos-cache below a full VM's image",
            words="its zos-cache's quota is below a full VM's image ({detail}): a full VM fails with 'disk quota "
            "exceeded' until the cache grows (5 GiB once 60% full); micro VMs are not affected",
            decide=_cache_small,
        ),
        WarningReason(
            key="grace-contracts",
            label="contracts in grace hold capacity",
            words="{detail} of its contracts are in their grace period (unpaid): their VMs keep their memory and "
            "disk until the contracts are paid or cancelled",
            decide=_grace,
        ),
    )
}


@dataclass(frozen=True)
class NodeWarning:
    key: str
    detail: str = ""

    @property
    def reason(self) -> WarningReason:
        found = WARNING_REASONS.get(self.key)
        if found is None:  # a key a later version knew: said plainly, never an error
            return WarningReason(self.key, self.key, f"{self.key} ({{detail}})", lambda _f: None)
        return found

    @property
    def label(self) -> str:
        return self.reason.label

    @property
    def words(self) -> str:
        return self.reason.words.format(detail=self.detail)

    def as_dict(self) -> dict:
        return {"key": self.key, "detail": self.detail, "label": self.label, "words": self.words}


def node_warnings(facts: WarningFacts) -> tuple[NodeWarning, ...]:
    """Every warning that holds, in WARNING_REASONS' order."""
    found = []
    for reason in WARNING_REASONS.values():
        detail = reason.decide(facts)
        if detail is not None:
            found.append(NodeWarning(reason.key, detail))
    return tuple(found)
