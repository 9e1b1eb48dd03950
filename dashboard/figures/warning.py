"""The one place a node's warnings are decided: its row and the settings, handed to capacity.warnings.

Like figures.closure for closures: `WARNING_FIELDS` names the Node columns read (the fleet rows and
placement read them with their own), `warnings_of_values` fills `WarningFacts` from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from dashboard.capacity.policy import cache_now
from dashboard.capacity.warnings import NodeWarning, WarningFacts, node_warnings

WARNING_FIELDS = ("zos_cache_sru", "pools_sru", "grace_contracts")


def warning_facts(values: Mapping[str, Any]) -> WarningFacts:
    # The cache's quota counts only with the pools known (Node.zos_cache's rule).
    quota = values["zos_cache_sru"] if values["pools_sru"] else None
    return WarningFacts(
        cache_quota=cache_now(quota) if quota is not None else None,
        full_vm_image=settings.FULL_VM_IMAGE_SRU,
        grace_contracts=values["grace_contracts"],
    )


def warnings_of_values(values: Mapping[str, Any]) -> tuple[NodeWarning, ...]:
    return node_warnings(warning_facts(values))


def warnings_of(node: Any) -> tuple[NodeWarning, ...]:
    return warnings_of_values({name: getattr(node, name) for name in WARNING_FIELDS})
