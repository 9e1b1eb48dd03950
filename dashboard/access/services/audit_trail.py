"""The audit trail's one writer: every door that records who did what calls `audit_record` (one row)
or `audit_records` (many in one statement); nothing else creates an AuditEvent.

The trail is appended, never edited. The caller says the action, the sentence and the detail; this
module only decides how a row is stored: an anonymous actor (a request nobody signed in to, or no
user at all) is stored as no actor; an unsaved user is an error, as Django makes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from dashboard.models import AuditEvent, Job, Node
from dashboard.rows import rows_insert


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One row of the trail before it is stored, field for field as AuditEvent has them.

    A related row is given as the row (`node=`) or as its primary key (`node_id=`), as Django's own
    model constructor takes it; never both.
    """

    action: str
    message: str
    source: str
    actor: AbstractBaseUser | AnonymousUser | None = None
    actor_id: int | None = None
    node: Node | None = None
    node_id: int | None = None
    job: Job | None = None
    job_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The model's keyword arguments for this row."""
        fields: dict[str, Any] = {
            "action": self.action,
            "message": self.message,
            "source": self.source,
            "detail": self.detail,
        }
        for name in ("actor", "node", "job"):
            given, given_id = getattr(self, name), getattr(self, f"{name}_id")
            if given is not None and given_id is not None:
                raise ValueError(f"an audit entry names its {name} twice: give {name} or {name}_id")
            if given_id is not None:
                fields[f"{name}_id"] = given_id
            elif name == "actor":
                fields["actor"] = None if getattr(given, "is_anonymous", True) else given
            else:
                fields[name] = given
        return fields


def actor_of(by) -> AbstractBaseUser | None:
    """The user a row names as who did it: a stored user, else None (no one signed in, a program's
    token without a user, a command typed at the shell)."""
    return by if getattr(by, "pk", None) is not None and not getattr(by, "is_anonymous", False) else None


def audit_record(
    *,
    action: str,
    message: str,
    source: str,
    actor: AbstractBaseUser | AnonymousUser | None = None,
    actor_id: int | None = None,
    node: Node | None = None,
    node_id: int | None = None,
    job: Job | None = None,
    job_id: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one row to the audit trail (in the caller's transaction) and return it."""
    entry = AuditEntry(
        action=action,
        message=message,
        source=source,
        actor=actor,
        actor_id=actor_id,
        node=node,
        node_id=node_id,
        job=job,
        job_id=job_id,
        detail=detail or {},
    )
    return AuditEvent.objects.create(**entry.fields())


def audit_records(entries: Iterable[AuditEntry]) -> None:
    """Append these rows in one statement (in the caller's transaction); none when there are none.

    By COPY (rows.rows_insert): a page of 100 onboarded nodes is 100 events, and bulk_create's
    preparing of each value was a tenth of the page's time (issue 43). No row comes back: no caller reads one.
    """
    rows_insert(AuditEvent, [AuditEvent(**entry.fields()) for entry in entries])
