# A slice has at most one live deployment: a partial unique index on (node, slice_index) where the
# record is deployed. Reports accepted before it could leave two live records on one slice (issue 22,
# finding 1), or a slice marked free while a record still held it; both are repaired first, each
# repair audited (source "migrate") and counted on the migration's output:
# - of two or more live records on one slice, the one deployed last stays live; the others are marked
#   released at the moment it was deployed (the slice cannot have held both);
# - a slice that a live record holds but the catalog says is free is marked deployed again (offering
#   it would sell a slice a VM runs on). Those nodes' stored figures are then out of date:
#   `manage.py figures_refresh` stores them (the output says so when it happened).
from django.db import migrations, models
from django.db.models import Count, Q


def live_deployments_repair(apps, schema_editor):
    Deployment = apps.get_model("dashboard", "Deployment")
    Slice = apps.get_model("dashboard", "Slice")
    AuditEvent = apps.get_model("dashboard", "AuditEvent")
    superseded = 0
    doubled = (
        Deployment.objects.filter(state="deployed")
        .values("node_id", "slice_index")
        .annotate(live=Count("id"))
        .filter(live__gt=1)
    )
    for slot in doubled:
        records = list(
            Deployment.objects.filter(state="deployed", node_id=slot["node_id"], slice_index=slot["slice_index"])
            .select_related("node")
            .order_by("-started_at", "-id")
        )
        kept, older = records[0], records[1:]
        for record in older:
            Deployment.objects.filter(pk=record.pk).update(state="deleted", finished_at=kept.started_at)
            AuditEvent.objects.create(
                source="migrate",
                action="deployment.repaired",
                node_id=record.node_id,
                message=(
                    f"migration 0017: slice {record.slice_index} of node {record.node.grid_id} had two live deployments; "
                    f"{record.marketplace_id or record.pk!r} marked released when "
                    f"{kept.marketplace_id or kept.pk!r} was deployed ({kept.started_at:%Y-%m-%d %H:%M} UTC)"
                ),
                detail={"deployment": record.pk, "kept": kept.pk, "slice": record.slice_index},
            )
            superseded += 1
    freed_wrongly = list(
        Slice.objects.filter(state="free", deployments__state="deployed").select_related("node").distinct()
    )
    for slice_ in freed_wrongly:
        Slice.objects.filter(pk=slice_.pk).update(state="deployed")
        holder = Deployment.objects.filter(slice_id=slice_.pk, state="deployed").first()
        AuditEvent.objects.create(
            source="migrate",
            action="slice.repaired",
            node_id=slice_.node_id,
            message=(
                f"migration 0017: slice {slice_.index} of node {slice_.node.grid_id} was free while deployment "
                f"{holder.marketplace_id or holder.pk!r} held it; marked deployed again"
            ),
            detail={"slice": slice_.pk, "deployment": holder.pk},
        )
    if superseded or freed_wrongly:
        nodes = sorted({s.node.grid_id for s in freed_wrongly})
        print(
            f"\n  0017: {superseded} deployment record(s) marked released (a newer one held the slice), "
            f"{len(freed_wrongly)} slice(s) marked deployed again"
            + (f" on node(s) {', '.join(map(str, nodes))}: run `manage.py figures_refresh`" if nodes else "")
            + "; each is in the audit trail (action deployment.repaired / slice.repaired)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0016_node_grid_id"),
    ]

    operations = [
        migrations.RunPython(live_deployments_repair, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="deployment",
            constraint=models.UniqueConstraint(
                condition=Q(state="deployed"), fields=("node", "slice_index"), name="one_live_deployment_per_slice"
            ),
        ),
    ]
