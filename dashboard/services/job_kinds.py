"""What each kind of job takes: a node, a farm, parameters, a dry run, and who may ask.

services.jobs asks this before it inserts a Job, and raises JobError with the words returned.
"""

from __future__ import annotations

from dashboard.models import Job


def job_request_problem(*, kind, node, farm_id, by, source, dry_run, parameters) -> str | None:
    """Why this request cannot be a job, in words (None when it can): each kind says what it takes."""
    if kind not in Job.Kind.values:
        return f"unknown job kind {kind!r}; use one of: {', '.join(Job.Kind.values)}"
    if source not in Job.Source.values:
        return f"unknown source {source!r}; use one of: {', '.join(Job.Source.values)}"
    if kind == Job.Kind.BULK_REREGISTER:
        if node is not None:
            return "a bulk re-register covers all stale nodes (or one farm's); it takes no node"
        if farm_id is not None and (isinstance(farm_id, bool) or not isinstance(farm_id, int) or farm_id < 0):
            return f"farm id must be a whole number of zero or more, not {farm_id!r}"
    elif kind == Job.Kind.ONBOARD:
        if node is not None or farm_id is not None or not isinstance(parameters, dict):
            return "adding nodes from the grid takes farm ids or node ids as parameters, no node"
    elif kind == Job.Kind.SIMULATE:
        if node is not None or farm_id is not None or dry_run:
            return "a simulated month takes its nodes from the candidate policy's scope, and changes nothing"
        if not isinstance(parameters, dict) or not isinstance(parameters.get("candidate"), dict):
            return "a simulated month needs the candidate policy's parameters"
    else:
        if node is None or getattr(node, "pk", None) is None:
            return f"a {Job.Kind(kind).label.lower()} job needs a registered node"
        if farm_id is not None:
            return "a farm id only applies to a bulk re-register"
    if kind == Job.Kind.PRECHECK and parameters:
        age = parameters.get("max_age_seconds") if isinstance(parameters, dict) else None
        if set(parameters) != {"max_age_seconds"} or isinstance(age, bool) or not isinstance(age, int) or age < 0:
            return "a precheck takes one parameter, max_age_seconds (a whole number from 0)"
    elif parameters and kind not in (Job.Kind.SIMULATE, Job.Kind.ONBOARD):
        return f"a {Job.Kind(kind).label.lower()} job takes no parameters"
    if dry_run and kind == Job.Kind.PRECHECK:
        return "a precheck changes no catalog; it has no dry run"
    if by is not None and (not getattr(by, "is_authenticated", False) or getattr(by, "pk", None) is None):
        return "jobs are requested by a signed-in user (or by nobody, from the command line)"
    return None
