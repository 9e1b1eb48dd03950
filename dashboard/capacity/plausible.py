"""Whether a reported `usable` figure is believable, judged against what is known of its node then.

ZOS's usable figure is total - max(counted, actually used) (zosbase pkg/primitives/statistics.go), so it
is never above total less the reserve, and what it tells beyond the VMs' memory (ZOS's own use + the
VMs' overhead) should lie near the line the node's group draws (capacity.overhead), within that line's
doubt. A figure far outside is not ZOS's word for the model to follow: it is kept (an observation on
file) but held aside until someone looks (issue 44: one made-up `usable 1 bytes` rewrote 84 nodes).
Pure: plain numbers in, a `Judgement` out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dashboard.capacity.lessons import used_is_the_count, zos_reserve_mru
from dashboard.capacity.sizes import GiB, MiB, format_size

# How many of the line's standard deviations a point may lie from it: far enough that a node of its
# own deviation, or a refusal beside the daily test VM, passes; a made-up figure of GiBs does not.
FAR_SD = 4.0
# Beside the test VM (512 MiB outside ZOS's count, zosbase provisiontest) a true refusal tells that much
# more, with its overhead: never a reason to hold a point aside.
TEST_VM_SLACK_MRU = 768 * MiB
# A node may use more (or less) per VM than its build's line (its own devices, its own daemons): the
# month's worlds give nodes up to 1.5 GiB a VM of their own. A node's own deviation is its own lesson,
# never a reason to hold its reading aside.
NODE_DEVIATION_PER_VM_MRU = 2 * GiB


@dataclass(frozen=True)
class Expected:
    """What the group's line expects beyond the VMs' memory at the point's VM count, and its doubt.
    `measured`: a line refusals drew at two VM counts or more (else the priors, or one VM count)."""

    beyond_mru: float
    sd_mru: float
    measured: bool = False


@dataclass(frozen=True)
class Judgement:
    plausible: bool
    why: str = ""  # plain words: why the figure is held aside ("" when plausible)


PLAUSIBLE = Judgement(True)


def usable_judged(*, total_mru: int, usable_mru: int, vm_mru: int, vms: int, expected: Expected | None) -> Judgement:
    """Judge ZOS's reported `usable_mru` on a node of `total_mru` running `vms` VMs of `vm_mru` in all
    (the memory ZOS counted for them), against the group's `expected` line (None: nothing expected)."""
    size = format_size
    if not 0 <= usable_mru <= total_mru:
        return Judgement(False, f"usable {size(usable_mru)} is outside the node's total of {size(total_mru)}")
    reserve = zos_reserve_mru(total_mru)
    if usable_mru > total_mru - reserve:
        return Judgement(
            False,
            f"usable {size(usable_mru)} is more than ZOS ever leaves: it keeps its reserve of {size(reserve)} "
            f"of the node's {size(total_mru)}",
        )
    if expected is None:
        return PLAUSIBLE
    beyond = total_mru - usable_mru - vm_mru
    doubt = FAR_SD * expected.sd_mru + vms * NODE_DEVIATION_PER_VM_MRU
    # Up to its reserve the host's use is within ZOS's own count (10% of a big node, above most lines): only
    # what goes past both the line and the reserve can be far above.
    high = max(expected.beyond_mru, reserve) + doubt + TEST_VM_SLACK_MRU
    line = "its group's line" if expected.measured else "what is known of ZOS builds so far"
    told = (
        f"usable {size(usable_mru)} says the host used {size(max(beyond, 0))} beyond the memory of its {vms} VM(s); "
        f"{line} expects {size(round(expected.beyond_mru))} (± {size(math.ceil(expected.sd_mru))})"
    )
    # Where ZOS's count decided (used = the VMs and the reserve to the byte), usable tells ZOS's own count, not
    # what the host used: only that it used no more (capacity.lessons.used_is_the_count). Neither far above a
    # line (the reserve is ZOS's rule, 10% of a big node) nor far below it.
    if used_is_the_count(total_mru=total_mru, vm_mru=vm_mru, actual_mru=total_mru - usable_mru):
        return PLAUSIBLE
    if beyond > high:
        return Judgement(False, f"{told}: far above it, beyond what a node of its own deviation uses")
    if expected.measured and beyond < expected.beyond_mru - doubt:
        return Judgement(False, f"{told}: far below it, beyond what a node of its own deviation saves")
    return PLAUSIBLE
