"""What one node's change does to its whole group runs after the change's own transaction (issue 44).

Every writer locks its node first (figures.services.node_writes); a memory lesson then reaches every
node of its build. Done inside the report's transaction, that was one node locked, then the group: two
reports on two nodes of a build each held its own node and waited for the other's (16 of 30 refusals
answered 500 DeadlockDetected, holds and releases caught with them). So a group's step is collected
here (`group_step_after`) and run once the outermost `group_steps_after` block has ended, its
transaction committed: each step in a transaction of its own that holds no lock when it starts and
locks the group's nodes in pk order, the order every other writer of many nodes takes. Refits of one
build also take the build's advisory lock (lessons.services.memory_model), so the last to run saw every
observation committed before it: the figures end as if the reports had come one by one.

A step fits what is committed, so running one more than needed changes nothing. With no collecting
block around it (a caller that never opened one) a step runs at once, as before.

A group's writers take turns (`group_turn`): a report that teaches a build waits for the build's
advisory lock before it locks any node, and keeps it until its group steps have run, so reports of
one build run one after another, each seeing the lesson the one before left (one lock order: the
group's turn, then node rows in pk order). Outside any transaction the turn is a session lock
released at the end of the collecting block; inside one it is held to that transaction's end.

A step that fails once its change is committed does not undo the change nor fail the caller: it is
logged with the reason, and the hourly follow (lessons.services.lesson_evidence.memory_lessons_follow) fits
the group from what is committed.

`lock_conflicts_retried` retries a deadlock or serialisation failure a few times (PostgreSQL rolls
the loser back; it may simply run again), then raises LockConflict: the doors answer it as busy
(503, try again), never as a failure of the dashboard.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import DatabaseError, OperationalError, connection, transaction
from psycopg import errors as pg_errors

T = TypeVar("T")
log = logging.getLogger(__name__)

LOCK_ATTEMPTS = 4
_LOCK_CONFLICTS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
_pending = threading.local()  # the open block's steps; a thread is one request, one worker task


class LockConflict(Exception):
    """Still refused by PostgreSQL's lock arbitration after LOCK_ATTEMPTS: nothing was written; try again."""


def lock_conflict(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled this back as a deadlock's loser or a serialisation failure."""
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, _LOCK_CONFLICTS)


def lock_conflicts_retried(work: Callable[[], T], *, what: str) -> T:
    """`work()` (which opens its own transaction or savepoint), run again after a lock conflict.

    Inside an outer transaction only the savepoint is rolled back (its locks with it), so running it
    again is sound; once the outer transaction is broken it cannot be, and the conflict is raised."""
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            return work()
        except OperationalError as exc:
            if not lock_conflict(exc) or connection.needs_rollback:
                raise
            if attempt == LOCK_ATTEMPTS:
                raise LockConflict(
                    f"{what}: the database refused it {attempt} times as a lock conflict ({exc.__cause__.sqlstate}); "
                    "nothing was written; try again"
                ) from exc
            log.warning(
                "%s: lock conflict (%s), attempt %d of %d", what, exc.__cause__.sqlstate, attempt, LOCK_ATTEMPTS
            )
            # Jittered, growing: two losers of one deadlock should not meet again at once.
            time.sleep(random.uniform(0.01, 0.05) * attempt)
    raise AssertionError("unreachable")


@contextmanager
def group_steps_after() -> Iterator[None]:
    """Collect the group steps asked for inside; the outermost block runs them after it ends, then
    gives back the groups' turns taken inside (`group_turn`).

    Nothing runs when the block raises: its writes are rolled back, and the next step of the group
    fits what is committed then."""
    if getattr(_pending, "steps", None) is not None:  # an outer block runs them after its own end
        yield
        return
    _pending.steps, _pending.turns = {}, []
    # Inside a transaction the turns end with it (after these steps); outside, this block gives them back.
    _pending.turns_end_with_transaction = connection.in_atomic_block
    try:
        yield
        steps = list(_pending.steps.items())
        _pending.steps = None  # a step asking for a step runs it at once
        for key, step in steps:
            _step_run(key, step)
    finally:
        _pending.steps = None
        _turns_given_back()


def group_turn(key: str) -> None:
    """Wait for this group's turn (PostgreSQL's advisory lock on `key`) and keep it to the end of the open
    collecting block, or of the transaction without one. Take it before any row lock: every writer
    takes a group's turn first, then node rows in pk order."""
    if getattr(_pending, "steps", None) is None or _pending.turns_end_with_transaction:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [key])
        return
    if key in _pending.turns:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [key])
    _pending.turns.append(key)


def _turns_given_back() -> None:
    turns, _pending.turns = getattr(_pending, "turns", None) or [], []
    for key in reversed(turns):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [key])
        except DatabaseError as exc:  # the connection broke: the session, and its locks, end with it
            log.warning("group turn %s not given back (%s); it ends with the connection", key, exc)
            connection.close()


def _step_run(key: tuple, step: Callable[[], object]) -> None:
    """One step, in its own transaction; a failure is logged and left for the hourly follow, since the
    change that asked for it is committed and stands."""
    try:
        lock_conflicts_retried(lambda: _in_transaction(step), what=f"group step {key}")
    except Exception as exc:
        log.error(
            "group step %s failed after its change was committed (%s: %s); the hourly follow applies it",
            key,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )


def group_step_after(key: tuple, step: Callable[[], object]) -> None:
    """Run `step` after the open collecting block (once per key: the last asked wins), or now without one."""
    steps = getattr(_pending, "steps", None)
    if steps is None:
        step()
    else:
        steps.pop(key, None)
        steps[key] = step


def _in_transaction(step: Callable[[], object]) -> None:
    with transaction.atomic():
        step()
