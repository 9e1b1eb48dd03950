"""What a job kind is: one declaration, read by the life cycle, the pages, the API and the commands.

A kind says what a request takes (a node or the fleet, a farm, typed parameters, a dry run), what
runs it, what it returns (its result model), how it is said in words, and which template partial
shows its result. dashboard.jobs.kinds finds the declarations (one module per kind) and Job.Kind,
its constraints, jobs.services.jobs, the reaper, the pages and the API read them.

The runner is named ("module:function") and resolved when a job of the kind first runs, not
imported: this layer sits below the models (Job.Kind is made from it), and the runners are services
that import the models, so an import would be a cycle. A registry filled by the runners' modules
would not do either: Job.Kind must be complete when the models load, before any service is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dashboard.jobs.results import JobResult


class ParametersUnreadable(ValueError):
    """A stored job's parameters that its kind cannot read (a row written by another version)."""


class JobParameters(BaseModel):
    """What a kind takes besides its node or farm; stored as JSON on Job.parameters.

    Strict at the request (no "5" for 5, no true for 1, no key the kind does not know); lenient
    when a stored row is read back (unknown keys dropped), so an old row still reads.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # What the kind takes, in one sentence: the refusal when the parameters do not validate.
    REFUSAL: ClassVar[str] = ""

    def stored(self) -> dict[str, Any]:
        """As Job.parameters keeps them: only what was given (a row reads the same as before)."""
        return self.model_dump(mode="json", exclude_unset=True)


class NoParameters(JobParameters):
    """A kind that takes nothing but its node or its farm."""


# Exceptions a runner lets through to its caller (the task's soft time limit).
StopOn = tuple[type[BaseException], ...]


@dataclass(frozen=True, kw_only=True)
class JobKind:
    """One kind of job. Only `value` is stored (in Job.kind): never change it, old rows keep theirs."""

    value: str
    label: str  # Job.Kind's label and the job page's heading: "Bulk re-register"
    result: type[JobResult]
    # "package.module:function", called as function(*, job, stop_on, **options); it finishes its job
    # itself (job_succeed in its last transaction) or raises.
    runner: str
    # What a request names: "node" (a registered node), or "fleet" (no node; a farm only with `farm`).
    target: Literal["node", "fleet"]
    # The job's target in words, from the job and its parameters read back (None when unreadable);
    # a node kind's is its node (node_target) unless it says otherwise.
    describe: Callable[[Any, JobParameters | None], str] | None = None
    # Inside a sentence: "bulk re-register of all stale nodes (job #12)"; the label in lower case by default.
    words: str = ""
    # The result's partial, a template of its own; "dashboard/jobs/kinds/<value, with _ for ->.html" by default.
    template: str = ""
    parameters: type[JobParameters] = NoParameters
    farm: bool = False  # a fleet kind that one farm may narrow
    dry_run: bool = True  # whether it can be previewed
    # Said when a request names the wrong target (a node for a fleet kind, say).
    takes: str = ""
    # Only one such job at a time, fleet-wide: the name of its partial unique constraint.
    one_at_a_time: str = ""
    # Only one active job per value of this parameter (a rollback: one per run it rolls back); the
    # models make its partial unique constraint on that key of Job.parameters (`one_per_constraint`).
    one_active_per: str = ""
    of: str = " of "  # between the words and the target
    progress_label: str = "Done"  # what progress_done counts, on the job page
    counts_failures: bool = False  # progress_failed means something for this kind
    # Added to the reaper's "worker lost" error: what a dead worker left behind.
    when_lost: str = "the catalog was left as it was; try again"
    # What a dead worker had done, read from what it committed (its progress, its audit events),
    # kept as the failed job's result by the reaper; None: nothing worth keeping.
    kept_when_lost: Callable[[Any], JobResult | None] | None = None
    # "package.module:function", called as function(job_id=...) inside the transaction that fails a job of
    # the kind (an error, its worker lost, never queued): what its own rows must say once it failed.
    when_failed: str = ""
    member: str = ""  # Job.Kind's member name; the value upper-cased by default
    # Background work (many grid reads nobody waits on): it leaves GRID_RATE_RESERVE to interactive requests.
    background: bool = False
    _runner: list = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.describe is None:
            if self.target != "node":
                raise TypeError(f"job kind {self.value!r}: a fleet kind says its target in words (describe)")
            object.__setattr__(self, "describe", node_target)
        if not self.words:
            object.__setattr__(self, "words", self.label.lower())
        if not self.template:
            object.__setattr__(self, "template", f"dashboard/jobs/kinds/{self.value.replace('-', '_')}.html")

    @property
    def name(self) -> str:
        return self.member or self.value.upper().replace("-", "_")

    @property
    def one_per_constraint(self) -> str:
        """The name of the constraint behind `one_active_per` ("" when the kind has none)."""
        return f"one_active_{self.name.lower()}_per_{self.one_active_per}" if self.one_active_per else ""

    def active_alike(self, asked: JobParameters) -> dict[str, Any]:
        """The lookup of the active fleet job a request of this kind would collide with (its constraint's)."""
        if self.one_active_per:
            return {"kind": self.value, f"parameters__{self.one_active_per}": getattr(asked, self.one_active_per)}
        return {"kind": self.value}

    def run(self, *, job, stop_on: StopOn = (), **options) -> object:
        return self.runner_function()(job=job, stop_on=stop_on, **options)

    def runner_function(self) -> Callable[..., object]:
        if not self._runner:
            self._runner.append(_named(self.runner))
        return self._runner[0]

    def failed(self, *, job_id: int) -> None:
        """The kind's `when_failed`, if it has one (jobs.services.jobs.job_close calls it)."""
        if self.when_failed:
            _named(self.when_failed)(job_id=job_id)

    # --- the request ---------------------------------------------------------------------------

    def request_problem(self, *, node, farm_id, dry_run: bool, parameters) -> str | None:
        """Why this request cannot be a job of this kind, in words (None when it can)."""
        if self.target == "node":
            if node is None or getattr(node, "pk", None) is None:
                return f"a {self.label.lower()} job needs a registered node"
            if farm_id is not None:
                return f"a farm id only applies to a {' or a '.join(farm_kinds()) or 'fleet job'}"
        else:
            if node is not None or (farm_id is not None and not self.farm):
                return self.takes or f"a {self.words} takes no node"
            if farm_id is not None and (isinstance(farm_id, bool) or not isinstance(farm_id, int) or farm_id < 0):
                return f"farm id must be a whole number of zero or more, not {farm_id!r}"
        if dry_run and not self.dry_run:
            return f"a {self.words} changes nothing; it has no dry run"
        try:
            self.parameters_checked(parameters)
        except ParametersUnreadable as exc:
            return str(exc)
        return None

    def parameters_checked(self, given) -> JobParameters:
        """The request's parameters as this kind's model; ParametersUnreadable, in words, when they are not."""
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise ParametersUnreadable(self._refusal(f"parameters are a mapping, not {type(given).__name__}"))
        try:
            return self.parameters.model_validate(given)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or "parameters"
            raise ParametersUnreadable(self._refusal(f"{where}: {first.get('msg', 'invalid')}")) from None

    def _refusal(self, detail: str) -> str:
        takes = self.parameters.REFUSAL or (
            f"a {self.label.lower()} job takes no parameters"
            if not self.parameters.model_fields
            else f"a {self.words} takes {', '.join(self.parameters.model_fields)}"
        )
        return f"{takes} ({detail})"

    # --- reading a stored job ------------------------------------------------------------------

    def parameters_read(self, stored) -> JobParameters:
        """A stored row's parameters, typed: keys this version does not know are dropped, types coerced."""
        known = {key: value for key, value in (stored or {}).items() if key in self.parameters.model_fields}
        try:
            return self.parameters.model_validate(known, strict=False)
        except ValidationError as exc:
            raise ParametersUnreadable(
                f"this {self.words} job's parameters cannot be read ({exc.errors()[0].get('msg', 'invalid')}); "
                "start it again"
            ) from None

    def target_words(self, job) -> str:
        """What the job is about, in words: "node 1774", "farm 3's stale nodes", "policy zos-lean"."""
        try:
            asked = self.parameters_read(job.parameters)
        except ParametersUnreadable:
            asked = None
        return self.describe(job, asked)

    def result_read(self, stored: dict | None) -> JobResult | None:
        """The stored result typed; None when there is none. ValidationError when it cannot be read."""
        if not stored:
            return None
        return self.result.model_validate(stored)


def node_target(job, _asked) -> str:
    """A node kind's target: the node, or what is left when it was deleted."""
    return f"node {job.node.grid_id}" if job.node_id is not None and job.node is not None else "a deleted node"


# Filled by dashboard.jobs.kinds when it loads; read through its functions.
_DECLARED: dict[str, JobKind] = {}


def farm_kinds() -> list[str]:
    return [kind.words for kind in _DECLARED.values() if kind.farm]


def _named(path: str) -> Callable[..., object]:
    """The function "package.module:function" names, imported on first use (never at import: a cycle)."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)
