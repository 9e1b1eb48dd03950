"""Deployment outcomes the marketplace reports: deployed, failed, released.

In production the marketplace deploys VMs, not this dashboard (the Grid Proxy is read-only), so
its reports are how a failure reaches the failed-deployments page and how a slice's state
follows what really happened. `deployment_outcome_record` is the one door for that write:

- The rules are dashboard.capacity.outcomes, a pure table: a slice has at most one live deployment
  (and the database says so too: a partial unique index on the deployed state per node and slice
  number); a report that contradicts the record, or is older than the move it would follow, is
  refused (OutcomeConflict, a 409 naming the live id or the move) and writes nothing; an old
  failure is kept as history without changing the slice.
- Every move is read and written under the node's lock, in one transaction: the record of the
  id, the slice's live deployment and the slice row are read after the lock is held.
- Idempotent on the marketplace's own deployment (contract) id: a unique constraint, and the
  look-up and the insert in one transaction. A report sent twice is one record; `deployed` then
  `released` for the same id is one record moving on.
- A failure is stored exactly as slice_deploy stores one (deployments.services.deploy._finish_failed):
  state "failed", ZOS's raw text, the classified cause and numbers; the capacity the node last
  reported is kept beside it (with when it was read), since the marketplace does not send one.
  The slice stays free, as after a failed slice_deploy. `outcome_failed_learn` is the one place
  where what the refusal teaches about the node goes (observations), dated by the refusal's own
  time, so an old refusal ages from when it happened.
- `deployed` marks the slice deployed, `released` frees it; the node's figures are rewritten in
  the same transaction. Both change the node's real used capacity, so a precheck job is queued
  after commit to read it again (the placeable/phantom figures would otherwise be stale).
- Bad input raises OutcomeError naming the field, and nothing is written: whole numbers a column
  can hold, text without NUL, lone surrogates or control characters (dashboard.grid.text), and a
  time within REPORT_MAX_AGE_DAYS back and CLOCK_SKEW ahead, stored in UTC.

Modules: `checks` (the input's bounds and errors), `record` (the door and the moves), `counted` (a VM the
slice audit counted gives way to its report), `probe` (a probe's refusal), `words`
(the sentences of refusals and repeats).
"""

from dashboard.deployments.services.outcomes.checks import (
    CLOCK_SKEW,
    MARKETPLACE_ID_MAX,
    MAX_ERROR_TEXT,
    OUTCOMES,
    WORKLOAD_ID_MAX,
    OutcomeConflict,
    OutcomeError,
    report_max_age,
)
from dashboard.deployments.services.outcomes.record import (
    OutcomeRecorded,
    deployment_outcome_record,
    outcome_failed_learn,
    outcome_failed_record,
)

__all__ = [
    "CLOCK_SKEW",
    "MARKETPLACE_ID_MAX",
    "MAX_ERROR_TEXT",
    "OUTCOMES",
    "WORKLOAD_ID_MAX",
    "OutcomeConflict",
    "OutcomeError",
    "OutcomeRecorded",
    "deployment_outcome_record",
    "outcome_failed_learn",
    "outcome_failed_record",
    "report_max_age",
]
