"""Migration 0017: two live deployments of one slice (issue 22, finding 1) are repaired, then refused.

Runs the real migration on the test database: back to 0016, the corrupt rows written as reports
left them, forward again; the repairs are audited and the constraint holds afterwards.
"""

import datetime as dt

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("dashboard", "0017_jobs_kind_declared_token")]
AFTER = [("dashboard", "0018_integrity_one_live_deployment")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_the_migration_repairs_doubled_and_freed_slices_then_refuses_a_second_live_deployment(capsys):
    old = migrate(BEFORE)
    try:
        Node, Slice, Deployment = (old.get_model("dashboard", name) for name in ("Node", "Slice", "Deployment"))
        node = Node.objects.create(grid_id=1774, farm_id=1, total_cru=8, total_mru=31 * 2**30, total_sru=2**40)
        held, freed = (
            Slice.objects.create(node=node, index=i, cru=1, mru=4 * 2**30, sru=2**30, state=state)
            for i, state in ((0, "deployed"), (1, "free"))
        )
        t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
        size = {"node": node, "cru": 1, "mru": 4 * 2**30, "sru": 2**30, "state": "deployed"}
        for n, (slice_, name) in enumerate([(held, "A"), (held, "third"), (freed, "B")]):
            row = Deployment.objects.create(slice=slice_, slice_index=slice_.index, marketplace_id=name, **size)
            Deployment.objects.filter(pk=row.pk).update(started_at=t0 + dt.timedelta(hours=n))
        # Finding 2: a failure reported "at" year 1, +01:00, stored as a BC date no page could read.
        bc = Deployment.objects.create(slice=freed, slice_index=1, marketplace_id="bc", **{**size, "state": "failed"})
        year_one = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
        Deployment.objects.filter(pk=bc.pk).update(started_at=year_one, finished_at=year_one)
        capsys.readouterr()

        new = migrate(AFTER)
        printed = capsys.readouterr().out
        Deployment, Slice, AuditEvent = (new.get_model("dashboard", n) for n in ("Deployment", "Slice", "AuditEvent"))
        states = dict(Deployment.objects.values_list("marketplace_id", "state"))
        assert states == {"A": "deleted", "third": "deployed", "B": "deployed", "bc": "failed"}
        assert Deployment.objects.get(marketplace_id="bc").started_at.year >= 2026  # readable, dated when received
        assert Deployment.objects.get(marketplace_id="A").finished_at == t0 + dt.timedelta(hours=1)
        assert Slice.objects.get(index=1).state == "deployed"
        assert sorted(AuditEvent.objects.values_list("action", flat=True)) == [
            "deployment.repaired",
            "deployment.repaired",
            "slice.repaired",
        ]
        assert "1 deployment record(s) marked released" in printed and "figures_refresh" in printed
        assert "1 dated outside the calendar" in printed
        with pytest.raises(IntegrityError), transaction.atomic():
            Deployment.objects.create(
                node_id=node.pk,
                slice_id=held.pk,
                slice_index=0,
                marketplace_id="fourth",
                cru=1,
                mru=1,
                sru=1,
                state="deployed",
            )
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
