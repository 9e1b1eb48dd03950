"""A reading's age: the two rules, named once here and said on the page where each applies.

- **uncertain** (READING_MAX_AGE_MINUTES, 60 min by default): the pages (fleet rows, node page, onboarding,
  reconciliation, the API's `reading.uncertain`) say neither "phantom" nor "fine" of figures resting on an
  older reading, and a precheck that may answer from the stored reading reads one this old again first.
- **too old to place on** (ALERT_READING_MAX_AGE, 24 h by default): placement blocks a node read longer
  ago ("old"), and the alert "old readings" names the same nodes; between the two a node is placed on from
  its last reading and shown uncertain, which the placement page says.

Issue 34, finding 3: the two limits were read from settings in five places under two names, and no
page said that placement trusts a reading the fleet page already calls uncertain.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings


def reading_uncertain_after() -> timedelta:
    """Past this the pages call a node's figures uncertain and a precheck reads it again (READING_MAX_AGE_MINUTES)."""
    return timedelta(minutes=settings.READING_MAX_AGE_MINUTES)


def reading_untrusted_after() -> timedelta:
    """Past this placement does not place on a node and the alert calls its reading old (ALERT_READING_MAX_AGE)."""
    return timedelta(seconds=settings.ALERT_READING_MAX_AGE)


def reading_is_uncertain(seen_at: datetime | None, now: datetime) -> bool:
    """Figures resting on no reading, or on one older than reading_uncertain_after(): neither phantom nor fine."""
    return seen_at is None or seen_at < now - reading_uncertain_after()


def _words(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 120 or minutes % 60:
        return f"{minutes} min"
    return f"{minutes // 60} h"


def reading_rules_words() -> str:
    """The two rules in one sentence, for the pages that show either."""
    return (
        f"a reading older than {_words(reading_uncertain_after())} makes a node's figures uncertain on the pages; "
        f"placement places on it from that reading until it is {_words(reading_untrusted_after())} old, then "
        "blocks it as too old"
    )
