"""Re-registering nodes: re-carving one node's catalog with its effective policy, or every stale one's.

Both run as jobs (jobs.services.jobs owns their life: request, claim, progress, result, reaping).

Re-registering a node (`node_reregister`):

- Rented and deployed slices are someone's VM: never deleted, never resized; their sizes are
  counted as occupied when carving.
- Free slices and "failed" ones are replaceable. A "failed" slice holds no VM (its deploy did
  not happen), so it is treated like a free one: removed, and replaced by a fresh free slice
  when the carve has room. It is never kept as "identical", so a second run is a no-op.
- Free slices already of the carved size are kept as they are (same rows, same indices):
  running twice changes nothing the second time ("already up to date").
- A free slice whose deploy is in flight (a "deploying" Deployment younger than
  capacity.outcomes.DEPLOY_IN_FLIGHT) is about to hold a VM: kept and counted as occupied. The final
  transaction, holding every slice row's lock, re-checks that no slice it deletes has a deploy
  started meanwhile (slice_deploy records its attempt under that same lock).
- A free slice under a live hold (deployments.selectors.holds.live_holds, judged at the plan's `now`) was
  promised to a buyer until the hold ends, and their `deployed` report will take it: kept as it
  is and counted as occupied, the same way, and said in a note. An expired or released hold
  protects nothing. The final transaction re-checks under the same locks that no slice it deletes
  is held now: a hold made since the plan refuses a single node's swap (CATALOG_CHANGED's kind,
  naming the slices; the next run keeps them) and sends a bulk node to be planned again on its own;
  hold_create locks the node's row first, so one asked after the swap finds its slice gone.
- New slices get indices after the highest kept one.
- The final transaction checks that the node's catalog_generation and its slice rows are
  exactly what the plan was made from; otherwise it fails with CATALOG_CHANGED and writes nothing.

Re-registering every stale node (`bulk_reregister`) makes the same plan per node, and applies
a batch of up to BULK_CHUNK nodes in one transaction with the same checks, node by node: a node
that moved since its plan is left out of its batch and planned again on its own.

Pause points for the kill tests (jobs.services.job_pause.job_test_pause): "claimed", "planned", and
"swapped", INSIDE the final transaction after the catalog writes (a node's or a batch's).

The package, by step:

- `plan`: what re-carving one node on a reading would do (`reregister_plan`), pure apart from
  building unsaved Slice rows; table-tested in tests/catalogs/test_reregister_plan.py.
- `apply`: the one short transaction that checks nothing moved and writes a plan (or a batch of
  plans), and the single-node job (`node_reregister`) with its grid read (`node_capacity_read`).
- `bulk`: the bulk job (`bulk_reregister`), batches of plans applied together; `bulk_seams` its
  limits and hooks (BulkLimits, BulkHooks), what tests and callers pass instead of patching it.
- `stale`: which nodes are stale, and which slices have a deploy in flight or a live hold.
"""

from dashboard.catalogs.services.reregister.apply import (
    CATALOG_CHANGED,
    GRID_READ_ATTEMPTS,
    CatalogChanged,
    node_capacity_read,
    node_reregister,
    reregister_apply,
)
from dashboard.catalogs.services.reregister.bulk import bulk_reregister
from dashboard.catalogs.services.reregister.bulk_seams import BULK_GRID_DOWN_AFTER, BulkHooks, BulkLimits
from dashboard.catalogs.services.reregister.plan import ReregisterPlan, reregister_plan
from dashboard.catalogs.services.reregister.stale import deploying_slices, stale_node_pks

__all__ = [
    "BULK_GRID_DOWN_AFTER",
    "CATALOG_CHANGED",
    "BulkHooks",
    "BulkLimits",
    "GRID_READ_ATTEMPTS",
    "CatalogChanged",
    "ReregisterPlan",
    "bulk_reregister",
    "deploying_slices",
    "node_capacity_read",
    "node_reregister",
    "reregister_apply",
    "reregister_plan",
    "stale_node_pks",
]
