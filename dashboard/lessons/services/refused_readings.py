"""A node's latest reading that could not be read, kept on its row, so its own page says so (issue 43).

When the parser refuses a node's answer (grid.types.MalformedPayload: an entry of a page, or the node read
on its own) nothing of it is written: the node keeps its last good reading and its figures. The fleet
page, /metrics and the alert say how many nodes the last fleet-wide reading refused; this keeps, on each
refused node, what was refused, why and by which reader, so its page can say that its figures are the
last good reading's. One reason a node (the latest), cut to the column's length: never a growing list.
The next good reading clears it (nodes.services.readings, the one writer of the reading's columns).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.utils import timezone

from dashboard.grid.text import text_printable
from dashboard.models import Node
from dashboard.rows import rows_update

# Who refused it, as the node page names them (Node.refused_reading_by).
BY_WATCH = "fleet watch"
BY_ONBOARDING = "onboarding"
BY_REREGISTER = "re-register"
BY_PRECHECK = "precheck"

_WHY_MAX = Node._meta.get_field("refused_reading").max_length
_COLUMNS = (
    ("grid_id", "integer"),
    ("refused_reading", "text"),
    ("refused_reading_by", "text"),
    ("refused_reading_at", "timestamptz"),
)


def readings_refused(refused: Mapping[int, str], *, by: str, at: datetime | None = None) -> None:
    """Keep on each registered node of `refused` (grid id -> the parser's words) that its latest reading was
    refused, why, by whom and when; one statement. Ids of nodes not registered are left alone."""
    if not refused:
        return
    at = at or timezone.now()
    rows = [(grid_id, text_printable(why, _WHY_MAX), by, at) for grid_id, why in sorted(refused.items())]
    rows_update(Node, _COLUMNS, rows)


def refused_by_label(skipped, *, registered: Mapping[int, object] | None = None) -> dict[int, str]:
    """The entries of a page the parser refused ((label, why): a node id, or "position N" when the entry
    had no id to name), as grid id -> why; only ids in `registered` when it is given."""
    found = {}
    for label, why in skipped:
        if label.isascii() and label.isdigit() and (registered is None or int(label) in registered):
            found[int(label)] = why
    return found
