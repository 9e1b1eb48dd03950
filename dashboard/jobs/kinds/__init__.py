"""Every kind of job, declared once: one module here per kind, each with its `KIND = JobKind(...)`.

A kind's module holds its typed parameters, the name of its runner, its result model, its words
and the name of its template partial (templates/dashboard/jobs/kinds/). Job.Kind, the models'
one-active constraints, jobs.services.jobs (requests), jobs.services.job_run (running), the reaper, the
pages, the API and the commands all read these declarations; none of them names a kind's words.

Adding a kind: a module here, its template, and the migration makemigrations writes for the new
choice (and its constraint, if only one may run at a time). tests/jobs/test_job_kinds.py checks that
every declared kind is complete and that nothing else describes a kind.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil

from pydantic import ValidationError

from dashboard.jobs.kinds.declaration import _DECLARED, JobKind, JobParameters, ParametersUnreadable

log = logging.getLogger(__name__)

__all__ = [
    "JobKind",
    "JobParameters",
    "ParametersUnreadable",
    "job_describe",
    "kind_of",
    "kinds",
    "kinds_declare",
    "result_of",
]


def kinds_declare(into: dict[str, JobKind]) -> dict[str, JobKind]:
    """Import each module of this package and add its KIND to `into`, ordered by label (the pages' order).

    A value declared twice (or already in `into`) is an error, not a silent replacement.
    """
    found: list[JobKind] = []
    for module in pkgutil.iter_modules(__path__):
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(declared, JobKind):
            found.append(declared)
    for kind in sorted(found, key=lambda k: k.label):
        if kind.value in into:
            raise RuntimeError(f"job kind {kind.value!r} is declared twice")
        into[kind.value] = kind
    return into


def kinds() -> tuple[JobKind, ...]:
    """Every declared kind, in the pages' order."""
    return tuple(_DECLARED.values())


def kind_of(value: str) -> JobKind | None:
    """The declaration of a stored kind; None for a value no module declares."""
    return _DECLARED.get(value)


def result_of(kind: str, stored: dict | None):
    """The stored result read back typed; None when there is none or it cannot be read (logged)."""
    declared = kind_of(kind)
    if declared is None:
        return None
    try:
        return declared.result_read(stored)
    except ValidationError as exc:
        log.warning("a %s result could not be read: %s", kind, exc.errors()[:3])
        return None


def job_describe(job, *, numbered: bool = True) -> str:
    """What the job is, in words: "dry run of re-register of node 1774 (job #12)" (without the number
    when the caller says it already). Takes any object with a Job's kind, dry_run, node, node_id,
    farm_id, parameters and pk.
    """
    declared = kind_of(job.kind)
    if declared is None:
        words, target, of = job.kind, "?", " of "
    else:
        words, target, of = declared.words, declared.target_words(job), declared.of
    if job.dry_run:
        words = f"dry run of {words}"
    return f"{words}{of}{target} (job #{job.pk})" if numbered else f"{words}{of}{target}"


kinds_declare(_DECLARED)
