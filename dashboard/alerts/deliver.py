"""Delivery at the edge: apprise, to every URL of ALERT_URLS, within a wall-clock deadline.

apprise's own time-outs (cto/rto in the URL, 4 s each by default) bound each socket operation,
not the whole delivery: a receiver that drips bytes, or a service that retries, could hold the
beat for minutes. The send runs in a daemon thread and the caller waits at most `deadline`
seconds; a delivery past it is reported as failed (and tried again at the next evaluation),
while the thread finishes or times out on its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import apprise

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    error: str = ""  # one line when not delivered


def alert_send(
    *, urls: Sequence[str], title: str, body: str, firing: bool, deadline: float, source: str = "ALERT_URLS"
) -> Delivery:
    """Send one message to every URL; delivered only when every URL took it within the deadline.
    `source` names the setting the URLs come from, for the words of a failure."""
    if not urls:
        return Delivery(False, f"no {source} configured")
    notifier = apprise.Apprise()
    bad = [url for url in urls if not notifier.add(url)]
    if bad:
        # Only the scheme: the rest of an apprise URL often holds a secret.
        schemes = ", ".join(sorted({url.split("://", 1)[0] + "://" for url in bad}))
        return Delivery(False, f"{source} has {len(bad)} URL(s) apprise cannot use ({schemes})")
    outcome: dict[str, object] = {}

    def send() -> None:
        try:
            outcome["ok"] = notifier.notify(
                title=title,
                body=body,
                notify_type=apprise.NotifyType.FAILURE if firing else apprise.NotifyType.SUCCESS,
            )
        except Exception as exc:  # an apprise plugin's bug must not end the beat
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=send, name="alert-delivery", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        return Delivery(False, f"the alert delivery did not finish within {deadline:g} s")
    if "error" in outcome:
        return Delivery(False, f"apprise failed: {outcome['error']}")
    if not outcome.get("ok"):
        return Delivery(False, f"a URL of {source} refused or did not answer (apprise's log says which)")
    return Delivery(True)
