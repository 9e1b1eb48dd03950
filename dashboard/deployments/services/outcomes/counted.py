"""A reported VM the slice audit had counted on a slice of its own choosing (catalogs.services.catalog_audit).

The audit counts a VM it finds on a node with no marketplace record ("audit.foreign-counted"); when the
marketplace then reports that VM on a slice, the audit's record gives way, so one VM holds one slice.
"""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.capacity.catalog_audit import contract_of
from dashboard.deployments.services.outcomes.checks import OutcomeConflict
from dashboard.models import AuditEvent, Deployment, Node, Slice


def counted_move(node: Node, *, slice_index: int, workload_id: str, by, source: str) -> None:
    """The VM this report names was counted by the slice audit on a slice of its choosing (a record
    with no marketplace id): that record gives way, so one VM holds one slice, the reported one. The
    audit's record on another node is refused, naming it (the report or the audit is wrong there)."""
    contract = contract_of(workload_id)
    named = Q(grid_workload_id=workload_id) | (Q(grid_workload_id__contains=f"-{contract}-") if contract else Q())
    candidates = Deployment.objects.filter(named, state=Deployment.State.DEPLOYED, marketplace_id="")
    audited = AuditEvent.objects.filter(
        action="audit.foreign-counted", detail__deployment__in=[d.pk for d in candidates]
    )
    counted = [
        d
        for d in candidates.filter(pk__in=[e.detail["deployment"] for e in audited]).select_related("node")
        if d.grid_workload_id == workload_id or (contract is not None and contract_of(d.grid_workload_id) == contract)
    ]
    for record in counted:
        if record.node_id != node.pk:
            raise OutcomeConflict(
                f"workload {workload_id!r} is counted by the slice audit on slice {record.slice_index} of node "
                f"{record.node.grid_id}, not node {node.grid_id}: one VM runs on one node; check the report",
                field="workload_id",
            )
        now = timezone.now()
        record.state, record.finished_at = Deployment.State.DELETED, now
        record.save(update_fields=["state", "finished_at"])
        Slice.objects.filter(node=node, index=record.slice_index, state=Slice.State.DEPLOYED).update(
            state=Slice.State.FREE, updated_at=now
        )
        audit_record(
            actor=by,
            source=source,
            action="audit.counted-moved",
            node=node,
            message=f"workload {workload_id!r}, counted by the slice audit on slice {record.slice_index} of node "
            f"{node.grid_id}, is reported on slice {slice_index}: the audit's count moves there",
            detail={"deployment": record.pk, "from_slice": record.slice_index, "to_slice": slice_index},
        )
