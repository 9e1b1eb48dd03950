# A slice has at most one live deployment: a partial unique index on (node, slice_index) where the
# record is deployed. Reports accepted before it could leave two live records on one slice (issue 22,
# finding 1), or a slice marked free while a record still held it; both are repaired first, each
# repair audited (source "migrate") and counted on the migration's output:
# - of two or more live records on one slice, the one deployed last stays live; the others are marked
#   released at the moment it was deployed (the slice cannot have held both);
# - a slice that a live record holds but the catalog says is free is marked deployed again (offering
#   it would sell a slice a VM runs on). Those nodes' stored figures are then out of date:
#   `manage.py figures_refresh` stores them (the output says so when it happened);
# - a record dated outside the calendar once in UTC (a report "at" year 1 with a +01:00 offset was
#   stored as a BC date, and every page listing it failed; finding 2) is dated when the report was
#   received (its audit event), the time it claimed kept in the repair's audit event.
from django.db import migrations, models
from django.db.models import Count, Q


def off_calendar_times_repair(apps, schema_editor):
    """Records whose times PostgreSQL holds but Python cannot read (before year 1 or after 9999 in UTC)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            """
            WITH broken AS (
                SELECT d.id, d.node_id, d.started_at::text AS claimed,
                       COALESCE(
                           (SELECT max(a.at) FROM dashboard_auditevent a
                             WHERE a.action LIKE %s AND a.detail->>'deployment' = d.id::text),
                           now()) AS received
                  FROM dashboard_deployment d
                 WHERE d.started_at < '0001-01-01 00:00:00+00' OR d.started_at > '9999-12-31 23:59:59+00'
                    OR d.finished_at < '0001-01-01 00:00:00+00' OR d.finished_at > '9999-12-31 23:59:59+00'
            )
            UPDATE dashboard_deployment d SET started_at = b.received, finished_at = b.received
              FROM broken b WHERE d.id = b.id
            RETURNING d.id, d.node_id, b.claimed
            """,
            ["deployment.%"],
        )
        repaired = cursor.fetchall()
    AuditEvent = apps.get_model("dashboard", "AuditEvent")
    for pk, node_pk, claimed in repaired:
        AuditEvent.objects.create(
            source="migrate",
            action="deployment.repaired",
            node_id=node_pk,
            message=(
                f"migration 0017: deployment {pk} was dated {claimed}, outside the calendar in UTC; "
                "dated when its report was received"
            ),
            detail={"deployment": pk, "claimed": claimed},
        )
    return len(repaired)


def live_deployments_repair(apps, schema_editor):
    off_calendar = off_calendar_times_repair(apps, schema_editor)
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
    if superseded or freed_wrongly or off_calendar:
        nodes = sorted({s.node.grid_id for s in freed_wrongly})
        print(
            f"\n  0017: {superseded} deployment record(s) marked released (a newer one held the slice), "
            f"{off_calendar} dated outside the calendar re-dated when received, "
            f"{len(freed_wrongly)} slice(s) marked deployed again"
            + (f" on node(s) {', '.join(map(str, nodes))}: run `manage.py figures_refresh`" if nodes else "")
            + "; each is in the audit trail (action deployment.repaired / slice.repaired)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0017_jobs_kind_declared_token"),
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
