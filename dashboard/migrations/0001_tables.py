"""Every table, index and constraint of the dashboard, generated afresh from the models (issue 38).

It replaces the 42 schema migrations of 0001_initial .. 0036_snapshot_tiers (0002_farm_totals_trigger
and 0003_roles replace the other three): a database that applied them all is marked as having applied
this one and runs nothing. A database older than 0036_snapshot_tiers must reach it first, on a release
from before the squash (docs/production.md). The old data repairs and backfills (figures_fill, the
live-deployment and off-calendar repairs, the policy history's first entries, the farms marked changed
by 0013 and 0031, ...) are not here: a fresh database has no rows to repair, and every database that
had them has run them.
"""

import django.db.models.deletion
import django.db.models.fields.json
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

# The node's grid id was `node_id` until 0016_node_grid_id renamed the column; its constraints kept
# their names on the databases that were there, so a fresh database is given the same names.
GRID_ID_CONSTRAINTS_AS_UPGRADED = """
ALTER TABLE dashboard_node RENAME CONSTRAINT dashboard_node_grid_id_key TO dashboard_node_node_id_key;
ALTER TABLE dashboard_node RENAME CONSTRAINT dashboard_node_grid_id_check TO dashboard_node_node_id_check;
"""
GRID_ID_CONSTRAINTS_AS_FRESH = """
ALTER TABLE dashboard_node RENAME CONSTRAINT dashboard_node_node_id_key TO dashboard_node_grid_id_key;
ALTER TABLE dashboard_node RENAME CONSTRAINT dashboard_node_node_id_check TO dashboard_node_grid_id_check;
"""


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("dashboard", "0001_initial"),
        ("dashboard", "0003_node_figures"),
        ("dashboard", "0004_observations"),
        ("dashboard", "0005_api_tokens"),
        ("dashboard", "0006_alerts"),
        ("dashboard", "0007_job_simulate"),
        ("dashboard", "0009_grid_requests"),
        ("dashboard", "0010_onboarding"),
        ("dashboard", "0011_slice_identity"),
        ("dashboard", "0012_figures_snapshots_job_steps"),
        ("dashboard", "0014_deployment_state_cause"),
        ("dashboard", "0015_farm_map_cells"),
        ("dashboard", "0016_node_grid_id"),
        ("dashboard", "0017_jobs_kind_declared_token"),
        ("dashboard", "0018_integrity_one_live_deployment"),
        ("dashboard", "0019_pg_map_cells_in_the_cache"),
        ("dashboard", "0019_pools_reports"),
        ("dashboard", "0019_watch_fleet_watch_node_events"),
        ("dashboard", "0020_audit_catalog_audit"),
        ("dashboard", "0020_merge_pg_watch"),
        ("dashboard", "0020_pg_placement_room"),
        ("dashboard", "0021_merge_watch_audit"),
        ("dashboard", "0022_merge_pg_placement"),
        ("dashboard", "0023_merge_pools"),
        ("dashboard", "0024_holds"),
        ("dashboard", "0024_node_closure"),
        ("dashboard", "0024_waves_policy_history"),
        ("dashboard", "0024_withholds"),
        ("dashboard", "0025_merge_withhold_closures"),
        ("dashboard", "0025_rent_contracts"),
        ("dashboard", "0026_merge_withhold_rent"),
        ("dashboard", "0027_merge_waves_withhold"),
        ("dashboard", "0028_merge_holds"),
        ("dashboard", "0029_node_held_sums"),
        ("dashboard", "0029_run_rollback_jobs"),
        ("dashboard", "0030_merge_held_sums_run_rollback"),
        ("dashboard", "0031_figures_settings_closed_tier"),
        ("dashboard", "0032_policy_figures_jobs"),
        ("dashboard", "0033_alert_told_urls"),
        ("dashboard", "0034_rmb_pools_version"),
        ("dashboard", "0035_memory_lessons"),
        ("dashboard", "0036_snapshot_tiers"),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="FarmTotals",
            fields=[
                ("farm_id", models.PositiveIntegerField(primary_key=True, serialize=False)),
                ("nodes", models.BigIntegerField(default=0)),
                ("nodes_up", models.BigIntegerField(default=0)),
                ("nominal", models.BigIntegerField(default=0)),
                ("deployable", models.BigIntegerField(default=0)),
                ("free", models.BigIntegerField(default=0)),
                ("rented", models.BigIntegerField(default=0)),
                ("deployed", models.BigIntegerField(default=0)),
                ("failed", models.BigIntegerField(default=0)),
                ("placeable", models.BigIntegerField(default=0)),
                ("phantom", models.BigIntegerField(default=0)),
                ("phantom_on_up_nodes", models.BigIntegerField(default=0)),
                ("stale", models.BigIntegerField(default=0)),
                ("unprechecked", models.BigIntegerField(default=0)),
                ("never_read", models.BigIntegerField(default=0)),
                ("deployable_now", models.BigIntegerField(default=0)),
                ("deployable_after_wake", models.BigIntegerField(default=0)),
                ("deployable_blocked", models.BigIntegerField(default=0)),
                ("deployable_closed", models.BigIntegerField(default=0)),
                ("oldest_reading_at", models.DateTimeField(blank=True, null=True)),
                ("computed_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="FarmTotalsChanged",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("farm_id", models.PositiveIntegerField(db_index=True)),
            ],
        ),
        migrations.CreateModel(
            name="FiguresSettings",
            fields=[
                ("key", models.CharField(default="fleet", max_length=16, primary_key=True, serialize=False)),
                ("values", models.JSONField(help_text="the figure-deciding settings, by name")),
                ("stored_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="FiguresSnapshot",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(db_index=True)),
                ("trigger", models.CharField(help_text='"beat", or the job that finished ("job 12")', max_length=40)),
            ],
            options={
                "ordering": ["at"],
            },
        ),
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=80)),
                ("prefix", models.CharField(help_text="The token's first characters, to recognise it", max_length=16)),
                ("key_hash", models.CharField(help_text="SHA-256 of the token, hex", max_length=64, unique=True)),
                ("scopes", models.JSONField(default=list, help_text="Some of read, precheck, report, act")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "revoked_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-pk"],
                "permissions": [("manage_apitoken", "Can create and revoke API tokens for any user")],
            },
        ),
        migrations.CreateModel(
            name="GridRequestTally",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("endpoint", models.CharField(max_length=40)),
                ("outcome", models.CharField(max_length=16)),
                (
                    "bucket",
                    models.CharField(help_text="Upper bound in seconds of the duration bucket, or +Inf", max_length=8),
                ),
                ("count", models.BigIntegerField(default=0)),
                ("seconds", models.FloatField(default=0.0, help_text="Total duration of these requests")),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("endpoint", "outcome", "bucket"), name="one_tally_per_endpoint_outcome_bucket"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="MemoryLesson",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("build", models.CharField(blank=True, db_index=True, max_length=128)),
                ("own_mru", models.BigIntegerField(blank=True, null=True)),
                ("per_vm_mru", models.BigIntegerField()),
                ("own_sd", models.BigIntegerField(default=0)),
                ("per_vm_sd", models.BigIntegerField(default=0)),
                ("spread_mru", models.BigIntegerField(default=0)),
                ("mean_vms", models.FloatField(default=0)),
                ("points", models.PositiveIntegerField()),
                ("nodes", models.PositiveIntegerField()),
                ("residuals", models.JSONField(blank=True, default=dict)),
                ("observation_ids", models.JSONField(blank=True, default=list)),
                ("learnt_from", models.JSONField(blank=True, default=list)),
                ("learnt_at", models.DateTimeField()),
                ("reverted_at", models.DateTimeField(blank=True, null=True)),
                (
                    "reverted_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["build", "-learnt_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="Node",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("grid_id", models.PositiveIntegerField(help_text="The grid's node id", unique=True)),
                ("farm_id", models.PositiveIntegerField(db_index=True)),
                ("farm_name", models.CharField(blank=True, max_length=128)),
                ("twin_id", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "status",
                    models.CharField(
                        choices=[("up", "Up"), ("down", "Down"), ("standby", "Standby"), ("unknown", "Unknown")],
                        db_index=True,
                        default="unknown",
                        max_length=8,
                    ),
                ),
                (
                    "dedicated",
                    models.BooleanField(
                        default=False,
                        help_text="The Grid Proxy's `dedicated`: true for any node without contracts, not only dedicated farms",
                        verbose_name="proxy's dedicated flag",
                    ),
                ),
                ("rented_by_twin_id", models.PositiveIntegerField(blank=True, null=True)),
                ("rent_contract_id", models.PositiveBigIntegerField(blank=True, null=True)),
                ("rent_state", models.CharField(blank=True, default="", max_length=16)),
                (
                    "in_dedicated_farm",
                    models.BooleanField(default=False, help_text="The farm is dedicated (the chain's flag)"),
                ),
                (
                    "extra_fee",
                    models.PositiveBigIntegerField(default=0, help_text="A dedicated node's extra fee (the chain's)"),
                ),
                ("healthy", models.BooleanField(blank=True, null=True)),
                ("power_state", models.CharField(blank=True, max_length=8)),
                ("power_target", models.CharField(blank=True, max_length=8)),
                (
                    "uptime",
                    models.BigIntegerField(
                        blank=True, help_text="Seconds since the node booted (last reading)", null=True
                    ),
                ),
                ("country", models.CharField(blank=True, max_length=64)),
                ("city", models.CharField(blank=True, max_length=64)),
                ("total_cru", models.PositiveIntegerField()),
                ("total_mru", models.BigIntegerField()),
                ("total_sru", models.BigIntegerField()),
                ("total_hru", models.BigIntegerField(default=0)),
                ("pools_sru", models.JSONField(blank=True, null=True)),
                ("pools_used", models.JSONField(blank=True, null=True)),
                ("pools_reported_at", models.DateTimeField(blank=True, null=True)),
                (
                    "pools_source",
                    models.CharField(
                        blank=True, help_text="Where the pools came from (PoolReport.Source)", max_length=16
                    ),
                ),
                ("zos_version", models.CharField(blank=True, max_length=128)),
                ("zos_version_at", models.DateTimeField(blank=True, null=True)),
                ("used_cru", models.PositiveIntegerField(blank=True, null=True)),
                ("used_mru", models.BigIntegerField(blank=True, null=True)),
                ("used_sru", models.BigIntegerField(blank=True, null=True)),
                ("used_hru", models.BigIntegerField(blank=True, null=True)),
                ("seen_at", models.DateTimeField(blank=True, null=True)),
                (
                    "reported_at",
                    models.DateTimeField(
                        blank=True, help_text="The node's last report (the proxy's updatedAt)", null=True
                    ),
                ),
                ("placeable_now", models.PositiveIntegerField(blank=True, null=True)),
                ("phantom_slices", models.PositiveIntegerField(blank=True, null=True)),
                ("phantom_reasons", models.JSONField(blank=True, default=dict)),
                ("prechecked_at", models.DateTimeField(blank=True, null=True)),
                ("hidden_mru_per_vm", models.BigIntegerField(default=0)),
                ("pool_room_below", models.BigIntegerField(blank=True, null=True)),
                ("pool_room_below_used_sru", models.BigIntegerField(blank=True, null=True)),
                ("zos_own_mru", models.BigIntegerField(blank=True, null=True)),
                ("memory_lesson_scope", models.CharField(blank=True, max_length=8)),
                ("carved_policy_name", models.CharField(max_length=64)),
                ("carved_policy_version", models.PositiveIntegerField(default=1)),
                ("carved_slice_sru", models.BigIntegerField(default=0)),
                ("carved_deployable", models.PositiveIntegerField(default=0)),
                ("carved_pools_known", models.BooleanField(default=False)),
                ("catalog_generation", models.PositiveIntegerField(default=1)),
                ("slice_index_next", models.PositiveIntegerField(default=0)),
                ("slices_free", models.PositiveIntegerField(default=0)),
                ("slices_rented", models.PositiveIntegerField(default=0)),
                ("slices_deployed", models.PositiveIntegerField(default=0)),
                ("slices_failed", models.PositiveIntegerField(default=0)),
                (
                    "deployable",
                    models.PositiveIntegerField(default=0, help_text="Slices the effective policy carves now"),
                ),
                ("stale", models.BooleanField(default=False)),
                ("stale_reason", models.TextField(blank=True)),
                (
                    "effective_policy",
                    models.CharField(blank=True, help_text='"name vN" of the effective policy', max_length=80),
                ),
                ("room_mru", models.BigIntegerField(blank=True, null=True)),
                ("room_sru", models.BigIntegerField(blank=True, null=True)),
                ("pools_shape", models.CharField(blank=True, default="?", max_length=16)),
                ("held_slices", models.PositiveIntegerField(default=0)),
                ("held_mru", models.BigIntegerField(default=0)),
                ("held_sru", models.BigIntegerField(default=0)),
                ("held_sizes", models.CharField(blank=True, default="", max_length=16)),
                ("held_first_expiry", models.DateTimeField(blank=True, null=True)),
                ("held_last_expiry", models.DateTimeField(blank=True, db_index=True, null=True)),
                ("withheld_reason", models.CharField(blank=True, default="", max_length=160)),
                ("withheld_until", models.DateTimeField(blank=True, null=True)),
                ("closure", models.CharField(blank=True, db_index=True, default="", max_length=32)),
                ("closure_detail", models.CharField(blank=True, default="", max_length=200)),
                ("registered_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "memory_lesson",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="dashboard.memorylesson",
                    ),
                ),
            ],
            options={
                "ordering": ["grid_id"],
                "permissions": [
                    ("reregister_node", "Can re-register a node (re-carve its catalog)"),
                    ("precheck_node", "Can run a capacity precheck"),
                    ("bulk_reregister", "Can re-register all stale nodes"),
                    ("deploy_slice", "Can deploy a slice"),
                    ("onboard_nodes", "Can add nodes from the grid"),
                    ("fix_catalog", "Can fix the catalog from the slice audit"),
                ],
            },
        ),
        migrations.RunSQL(GRID_ID_CONSTRAINTS_AS_UPGRADED, GRID_ID_CONSTRAINTS_AS_FRESH),
        migrations.AddField(
            model_name="memorylesson",
            name="trigger_node",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="dashboard.node",
            ),
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("onboard", "Add nodes from the grid"),
                            ("bulk-reregister", "Bulk re-register"),
                            ("policy-figures", "Figures rewrite"),
                            ("fleet-watch", "Fleet watch"),
                            ("simulate", "Policy trial"),
                            ("precheck", "Precheck"),
                            ("reregister", "Re-register"),
                            ("run-rollback", "Rollback"),
                            ("catalog-audit", "Slice audit"),
                        ],
                        max_length=16,
                    ),
                ),
                ("farm_id", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("web", "Web"),
                            ("command", "Command"),
                            ("admin", "Admin"),
                            ("api", "API"),
                            ("beat", "Beat"),
                        ],
                        default="web",
                        max_length=8,
                    ),
                ),
                ("dry_run", models.BooleanField(default=False)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                        ],
                        db_index=True,
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("step", models.CharField(blank=True, max_length=200)),
                ("progress_done", models.PositiveIntegerField(default=0)),
                ("progress_total", models.PositiveIntegerField(default=0)),
                ("progress_failed", models.PositiveIntegerField(default=0)),
                ("steps", models.JSONField(blank=True, default=list)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("error", models.TextField(blank=True)),
                ("parameters", models.JSONField(blank=True, default=dict)),
                ("result", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "requested_by",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "requested_token",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="jobs",
                        to="dashboard.apitoken",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="jobs",
                        to="dashboard.node",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="Deployment",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slice_index", models.PositiveIntegerField()),
                ("cru", models.PositiveIntegerField()),
                ("mru", models.BigIntegerField()),
                ("sru", models.BigIntegerField()),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("deploying", "Deploying"),
                            ("deployed", "Deployed"),
                            ("failed", "Failed"),
                            ("refused", "Refused by precheck"),
                            ("deleted", "Deleted"),
                        ],
                        db_index=True,
                        default="deploying",
                        max_length=10,
                    ),
                ),
                ("raw_error", models.TextField(blank=True)),
                (
                    "cause",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "—"),
                            ("memory", "Memory"),
                            ("disk", "Disk"),
                            ("validation", "Validation"),
                            ("node-offline", "Node offline"),
                            ("grid-unavailable", "Grid unavailable"),
                            ("node-closed", "Node not available to us (chain)"),
                            ("not-authorized", "Twin not authorized (chain)"),
                            ("contract-grace", "Contract in grace (chain)"),
                            ("chain-capacity", "Not enough resources (chain)"),
                            ("unknown", "Unknown"),
                        ],
                        db_index=True,
                        default="",
                        max_length=16,
                    ),
                ),
                ("needed_bytes", models.BigIntegerField(blank=True, null=True)),
                ("usable_bytes", models.BigIntegerField(blank=True, null=True)),
                ("capacity_seen", models.JSONField(blank=True, default=dict)),
                ("grid_workload_id", models.CharField(blank=True, max_length=64)),
                ("marketplace_id", models.CharField(blank=True, default="", max_length=128)),
                ("started_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "requested_by",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="deployments", to="dashboard.node"
                    ),
                ),
            ],
            options={
                "ordering": ["-started_at"],
            },
        ),
        migrations.CreateModel(
            name="CatalogGeneration",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("before", models.JSONField(default=dict)),
                ("slices_before", models.JSONField(default=list)),
                ("removed", models.JSONField(default=list)),
                ("added_indices", models.JSONField(default=list)),
                ("slices_after", models.JSONField(default=dict)),
                ("generation_after", models.PositiveIntegerField()),
                ("rolled_back_at", models.DateTimeField(blank=True, null=True)),
                (
                    "rolled_back_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="catalog_generations",
                        to="dashboard.job",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="catalog_generations",
                        to="dashboard.node",
                    ),
                ),
            ],
            options={
                "ordering": ["-at"],
            },
        ),
        migrations.CreateModel(
            name="CapacitySample",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("source", models.CharField(default="statistics", max_length=16)),
                ("vm_count", models.PositiveIntegerField()),
                ("vm_mru", models.BigIntegerField(help_text="Sum of the hosted VMs' memory")),
                ("vm_sru", models.BigIntegerField(help_text="Sum of the hosted VMs' disks, rootfs included")),
                ("total_mru", models.BigIntegerField()),
                ("total_sru", models.BigIntegerField()),
                ("used_mru", models.BigIntegerField()),
                ("used_sru", models.BigIntegerField()),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="capacity_samples",
                        to="dashboard.node",
                    ),
                ),
            ],
            options={
                "ordering": ["node", "at"],
            },
        ),
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("source", models.CharField(default="web", max_length=8)),
                ("action", models.CharField(max_length=40)),
                ("message", models.TextField()),
                ("detail", models.JSONField(blank=True, default=dict)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="audit_events",
                        to="dashboard.job",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="audit_events",
                        to="dashboard.node",
                    ),
                ),
            ],
            options={
                "ordering": ["-at"],
            },
        ),
        migrations.CreateModel(
            name="NodeEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("went-down", "Went down"),
                            ("standby", "Went to standby"),
                            ("woken", "Woken"),
                            ("back-up", "Back up"),
                            ("wake-not-woken", "Wake asked, not woken"),
                            ("unhealthy", "Unhealthy"),
                            ("rebooted", "Rebooted"),
                            ("total-changed", "Total capacity changed"),
                            ("used-moved", "Used capacity moved, no outcome reported"),
                            ("rent-grace", "Rent contract in grace"),
                            ("rent-paid", "Rent contract paid again"),
                            ("rent-ended", "Rent contract ended"),
                            ("rented", "Rented"),
                        ],
                        max_length=16,
                    ),
                ),
                ("at", models.DateTimeField(help_text="When the reading that showed it was taken")),
                ("words", models.CharField(max_length=300)),
                ("status_before", models.CharField(blank=True, max_length=8)),
                ("status_after", models.CharField(blank=True, max_length=8)),
                ("detail", models.JSONField(blank=True, default=dict)),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="events", to="dashboard.node"
                    ),
                ),
            ],
            options={
                "ordering": ["-at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="NodeWithhold",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("reason", models.CharField(max_length=160)),
                ("starts_at", models.DateTimeField(db_index=True)),
                (
                    "ends_at",
                    models.DateTimeField(blank=True, db_index=True, help_text="None: until released", null=True),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[("manual", "Maintenance"), ("quarantine", "Quarantine")],
                        default="manual",
                        max_length=12,
                    ),
                ),
                ("created_via", models.CharField(default="web", help_text="web, api, command or auto", max_length=8)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("released_at", models.DateTimeField(blank=True, null=True)),
                (
                    "failures",
                    models.JSONField(blank=True, default=list, help_text="Deployment ids behind a quarantine"),
                ),
                ("repeat", models.PositiveSmallIntegerField(default=0)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="withholds", to="dashboard.node"
                    ),
                ),
                (
                    "released_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-starts_at", "-pk"],
                "permissions": [("withhold_node", "Can withhold a node (maintenance) and lift a quarantine")],
            },
        ),
        migrations.CreateModel(
            name="Observation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[("memory", "Hidden memory use"), ("disk", "No pool holds the disk")], max_length=8
                    ),
                ),
                ("seen_at", models.DateTimeField(db_index=True)),
                ("source", models.CharField(default="deploy", max_length=16)),
                ("raw_error", models.TextField()),
                ("vm_count", models.PositiveIntegerField(help_text="VMs running on the node when ZOS refused")),
                ("total_mru", models.BigIntegerField(blank=True, null=True)),
                (
                    "accounted_mru",
                    models.BigIntegerField(blank=True, help_text="Workloads + reserve, as reported", null=True),
                ),
                (
                    "usable_mru",
                    models.BigIntegerField(blank=True, help_text="ZOS's usable figure in the refusal", null=True),
                ),
                ("hidden_mru_per_vm", models.BigIntegerField(default=0)),
                (
                    "zos_build",
                    models.CharField(blank=True, help_text="The node's ZOS build then (its group)", max_length=128),
                ),
                ("disk_size", models.BigIntegerField(blank=True, help_text="The disk no pool had room for", null=True)),
                ("used_sru", models.BigIntegerField(blank=True, help_text="SSD in use when it was refused", null=True)),
                ("cleared_at", models.DateTimeField(blank=True, null=True)),
                (
                    "cleared_by",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "deployment",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="observations",
                        to="dashboard.deployment",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="observations", to="dashboard.node"
                    ),
                ),
            ],
            options={
                "ordering": ["node", "-seen_at"],
            },
        ),
        migrations.CreateModel(
            name="Policy",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=64, unique=True)),
                (
                    "scope",
                    models.CharField(
                        choices=[("fleet", "Fleet default"), ("farm", "Farm override"), ("node", "Node override")],
                        default="fleet",
                        max_length=8,
                    ),
                ),
                ("farm_id", models.PositiveIntegerField(blank=True, null=True)),
                ("version", models.PositiveIntegerField(default=1)),
                ("slice_mru", models.BigIntegerField(default=4294967296)),
                ("slice_cru", models.PositiveIntegerField(default=1)),
                ("reserve_mru_percent", models.PositiveSmallIntegerField(default=10)),
                ("reserve_mru_floor", models.BigIntegerField(default=2147483648)),
                ("reserve_sru", models.BigIntegerField(default=21474836480)),
                ("overhead_mru_per_vm", models.BigIntegerField(default=0)),
                ("overhead_sru_per_vm", models.BigIntegerField(default=0)),
                ("rootfs", models.CharField(choices=[("zos", "zos"), ("none", "none")], default="zos", max_length=8)),
                ("min_slice_sru", models.BigIntegerField(default=10737418240)),
                ("sru_step", models.BigIntegerField(default=1073741824)),
                (
                    "arithmetic",
                    models.CharField(
                        choices=[("bytes", "bytes"), ("whole-gib", "whole-gib")], default="bytes", max_length=12
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "node",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="policy_override",
                        to="dashboard.node",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "policies",
            },
        ),
        migrations.CreateModel(
            name="PolicyVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("policy_name", models.CharField(db_index=True, max_length=64)),
                ("version", models.PositiveIntegerField()),
                (
                    "scope",
                    models.CharField(
                        choices=[("fleet", "Fleet default"), ("farm", "Farm override"), ("node", "Node override")],
                        max_length=8,
                    ),
                ),
                ("farm_id", models.PositiveIntegerField(blank=True, null=True)),
                ("parameters", models.JSONField(default=dict)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("created", "Created"),
                            ("changed", "Changed"),
                            ("reverted", "Reverted"),
                            ("recorded", "Recorded when the history began"),
                        ],
                        max_length=10,
                    ),
                ),
                ("reverted_from", models.PositiveIntegerField(blank=True, null=True)),
                ("source", models.CharField(default="web", max_length=8)),
                ("at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                (
                    "by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "policy",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="versions",
                        to="dashboard.policy",
                    ),
                ),
            ],
            options={
                "ordering": ["policy_name", "-version"],
            },
        ),
        migrations.CreateModel(
            name="PoolReport",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("pools", models.JSONField(help_text='[{"name", "type", "size", "used"}], bytes, as reported')),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("api", "API token (a deployer that reads them over RMB)"),
                            ("operator", "An operator (node page or node_register)"),
                            ("zos", "The node itself (asked by a reading)"),
                            ("rmb", "The node itself, over RMB (through rmb-peer)"),
                        ],
                        max_length=16,
                    ),
                ),
                ("origin", models.CharField(blank=True, help_text="The address or host it came from", max_length=255)),
                ("reported_at", models.DateTimeField()),
                (
                    "by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="pool_reports", to="dashboard.node"
                    ),
                ),
                (
                    "token",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="dashboard.apitoken",
                    ),
                ),
            ],
            options={
                "ordering": ["-reported_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="Slice",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("index", models.PositiveIntegerField()),
                ("cru", models.PositiveIntegerField()),
                ("mru", models.BigIntegerField()),
                ("sru", models.BigIntegerField(help_text="Data disk in bytes; the rootfs comes on top")),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("free", "Free"),
                            ("rented", "Rented"),
                            ("deployed", "Deployed"),
                            ("failed", "Failed"),
                        ],
                        db_index=True,
                        default="free",
                        max_length=10,
                    ),
                ),
                ("rented_by_twin_id", models.PositiveIntegerField(blank=True, null=True)),
                ("generation", models.PositiveIntegerField(default=1, help_text="Catalog generation that created it")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="slices", to="dashboard.node"
                    ),
                ),
            ],
            options={
                "ordering": ["node", "index"],
            },
        ),
        migrations.CreateModel(
            name="Hold",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slice_index", models.PositiveIntegerField()),
                ("marketplace_id", models.CharField(max_length=128)),
                ("charge_mru", models.BigIntegerField()),
                ("charge_sru", models.BigIntegerField()),
                ("created_at", models.DateTimeField()),
                ("expires_at", models.DateTimeField()),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                (
                    "end",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("released", "Released"),
                            ("deployed", "Turned into its deployment"),
                            ("expired", "Expired"),
                            ("retired", "Its slice was re-carved away"),
                        ],
                        default="",
                        max_length=10,
                    ),
                ),
                (
                    "by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "token",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="dashboard.apitoken",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="holds", to="dashboard.node"
                    ),
                ),
                (
                    "slice",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="holds",
                        to="dashboard.slice",
                    ),
                ),
            ],
            options={
                "ordering": ["expires_at", "pk"],
            },
        ),
        migrations.AddField(
            model_name="deployment",
            name="slice",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="deployments",
                to="dashboard.slice",
            ),
        ),
        migrations.CreateModel(
            name="SnapshotFigures",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "scope",
                    models.CharField(choices=[("fleet", "Fleet"), ("farm", "Farm"), ("node", "Node")], max_length=5),
                ),
                ("subject", models.BigIntegerField()),
                ("nodes", models.PositiveIntegerField(default=0)),
                ("nominal", models.PositiveIntegerField(default=0)),
                ("deployable", models.PositiveIntegerField(default=0)),
                ("free_deployable", models.PositiveIntegerField(default=0)),
                ("free", models.PositiveIntegerField(default=0)),
                ("placeable", models.PositiveIntegerField(default=0)),
                ("phantom", models.PositiveIntegerField(default=0)),
                ("phantom_down", models.PositiveIntegerField(default=0)),
                ("phantom_standby", models.PositiveIntegerField(default=0)),
                ("phantom_memory", models.PositiveIntegerField(default=0)),
                ("phantom_disk", models.PositiveIntegerField(default=0)),
                ("phantom_pool", models.PositiveIntegerField(default=0)),
                ("phantom_closed", models.PositiveIntegerField(default=0)),
                ("deployable_now", models.PositiveIntegerField(default=0)),
                ("deployable_after_wake", models.PositiveIntegerField(default=0)),
                ("deployable_blocked", models.PositiveIntegerField(default=0)),
                ("deployable_closed", models.PositiveIntegerField(default=0)),
                (
                    "snapshot",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="figures",
                        to="dashboard.figuressnapshot",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="WaveRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("awaiting", "Waiting for a second admin's approval"),
                            ("running", "Running"),
                            ("paused", "Paused"),
                            ("stopping", "Stopping after the batch in hand"),
                            ("stopped", "Stopped"),
                            ("done", "Done"),
                        ],
                        default="running",
                        max_length=10,
                    ),
                ),
                ("canary_farm", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "canary_share",
                    models.PositiveSmallIntegerField(blank=True, help_text="Percent of the stale nodes", null=True),
                ),
                ("batch_size", models.PositiveIntegerField(default=100)),
                (
                    "budget",
                    models.PositiveIntegerField(default=3, help_text="Refusals and failures allowed before it pauses"),
                ),
                ("spent_at_resume", models.PositiveIntegerField(default=0)),
                ("refusals", models.PositiveIntegerField(default=0)),
                ("failures", models.PositiveIntegerField(default=0)),
                ("stale_at_request", models.PositiveIntegerField(default=0)),
                ("waves", models.JSONField(blank=True, default=list)),
                ("paused_reason", models.CharField(blank=True, max_length=300)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("approved_at", models.DateTimeField(blank=True, null=True)),
                ("rollback", models.JSONField(blank=True, default=dict)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "approved_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="wave_run", to="dashboard.job"
                    ),
                ),
                (
                    "stopped_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Alert",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("rule", models.CharField(max_length=40)),
                ("subject", models.CharField(max_length=80)),
                (
                    "state",
                    models.CharField(
                        choices=[("firing", "Firing"), ("resolved", "Resolved")],
                        db_index=True,
                        default="firing",
                        max_length=8,
                    ),
                ),
                ("since", models.DateTimeField(help_text="When the current state began")),
                ("summary", models.CharField(max_length=300)),
                ("detail", models.TextField(blank=True)),
                ("evaluated_at", models.DateTimeField()),
                ("notified_state", models.CharField(blank=True, default="", max_length=8)),
                ("last_notified_at", models.DateTimeField(blank=True, null=True)),
                ("told_urls", models.JSONField(blank=True, default=dict)),
                ("acknowledged_at", models.DateTimeField(blank=True, null=True)),
                (
                    "acknowledged_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-since"],
                "permissions": [("acknowledge_alert", "Can acknowledge an alert")],
                "constraints": [
                    models.UniqueConstraint(fields=("rule", "subject"), name="one_alert_per_rule_and_subject")
                ],
            },
        ),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.UniqueConstraint(
                condition=models.Q(("revoked_at__isnull", True)),
                fields=("user", "name"),
                name="api_token_name_unique_per_user",
            ),
        ),
        migrations.AddConstraint(
            model_name="node",
            constraint=models.CheckConstraint(
                condition=models.Q(("total_mru__gte", 0), ("total_sru__gte", 0), ("total_hru__gte", 0)),
                name="node_total_not_negative",
            ),
        ),
        migrations.AddConstraint(
            model_name="node",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("used_mru__gte", 0), ("used_mru__isnull", True), _connector="OR"),
                    models.Q(("used_sru__gte", 0), ("used_sru__isnull", True), _connector="OR"),
                ),
                name="node_used_not_negative",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state__in", ["queued", "running"])),
                fields=("node",),
                name="one_active_job_per_node",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "onboard"), ("state__in", ["queued", "running"])),
                fields=("kind",),
                name="one_active_onboard_job",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "bulk-reregister"), ("state__in", ["queued", "running"])),
                fields=("kind",),
                name="one_active_bulk_job",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "fleet-watch"), ("state__in", ["queued", "running"])),
                fields=("kind",),
                name="one_active_fleet_watch_job",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "simulate"), ("state__in", ["queued", "running"])),
                fields=("kind",),
                name="one_active_simulate_job",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "catalog-audit"), ("state__in", ["queued", "running"])),
                fields=("kind",),
                name="one_active_catalog_audit_job",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                django.db.models.fields.json.KeyTextTransform("policy_id", "parameters"),
                condition=models.Q(("kind", "policy-figures"), ("state__in", ["queued", "running"])),
                name="one_active_policy_figures_per_policy_id",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                django.db.models.fields.json.KeyTextTransform("job_id", "parameters"),
                condition=models.Q(("kind", "run-rollback"), ("state__in", ["queued", "running"])),
                name="one_active_run_rollback_per_job_id",
            ),
        ),
        migrations.AddIndex(
            model_name="cataloggeneration",
            index=models.Index(fields=["job", "node"], name="catalog_generation_job_node"),
        ),
        migrations.AddConstraint(
            model_name="capacitysample",
            constraint=models.CheckConstraint(
                condition=models.Q(("vm_mru__gte", 0), ("vm_sru__gte", 0), ("used_mru__gte", 0), ("used_sru__gte", 0)),
                name="sample_sizes_not_negative",
            ),
        ),
        migrations.AddIndex(
            model_name="nodeevent",
            index=models.Index(fields=["node", "-at"], name="node_event_timeline"),
        ),
        migrations.AddIndex(
            model_name="nodeevent",
            index=models.Index(fields=["kind", "-at"], name="node_event_by_kind"),
        ),
        migrations.AddIndex(
            model_name="nodewithhold",
            index=models.Index(fields=["node", "released_at"], name="withhold_node_released"),
        ),
        migrations.AddConstraint(
            model_name="nodewithhold",
            constraint=models.CheckConstraint(
                condition=models.Q(("ends_at__isnull", True), ("ends_at__gt", models.F("starts_at")), _connector="OR"),
                name="withhold_ends_after_start",
            ),
        ),
        migrations.AddConstraint(
            model_name="nodewithhold",
            constraint=models.CheckConstraint(
                condition=models.Q(("reason", ""), _negated=True), name="withhold_has_reason"
            ),
        ),
        migrations.AddConstraint(
            model_name="observation",
            constraint=models.CheckConstraint(
                condition=models.Q(("hidden_mru_per_vm__gte", 0)), name="observation_hidden_not_negative"
            ),
        ),
        migrations.AddConstraint(
            model_name="policy",
            constraint=models.UniqueConstraint(
                condition=models.Q(("scope", "fleet")), fields=("scope",), name="one_fleet_default_policy"
            ),
        ),
        migrations.AddConstraint(
            model_name="policy",
            constraint=models.UniqueConstraint(
                condition=models.Q(("scope", "farm")), fields=("farm_id",), name="one_policy_per_farm"
            ),
        ),
        migrations.AddConstraint(
            model_name="policy",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("farm_id__isnull", False), ("scope", "farm")),
                    models.Q(("scope", "farm"), _negated=True),
                    _connector="OR",
                ),
                name="farm_policy_names_farm",
            ),
        ),
        migrations.AddConstraint(
            model_name="policy",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("node__isnull", False), ("scope", "node")),
                    models.Q(("scope", "node"), _negated=True),
                    _connector="OR",
                ),
                name="node_policy_names_node",
            ),
        ),
        migrations.AddConstraint(
            model_name="policy",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("slice_mru__gte", 262144000),
                    ("reserve_mru_floor__gte", 0),
                    ("reserve_sru__gte", 0),
                    ("overhead_mru_per_vm__gte", 0),
                    ("overhead_sru_per_vm__gte", 0),
                    ("min_slice_sru__gte", 0),
                    ("sru_step__gte", 1),
                    ("reserve_mru_percent__lte", 90),
                ),
                name="policy_sizes_sane",
            ),
        ),
        migrations.AddConstraint(
            model_name="policyversion",
            constraint=models.UniqueConstraint(
                condition=models.Q(("policy__isnull", False)),
                fields=("policy", "version"),
                name="one_entry_per_policy_version",
            ),
        ),
        migrations.AddIndex(
            model_name="poolreport",
            index=models.Index(fields=["node", "-reported_at"], name="dashboard_p_node_id_416651_idx"),
        ),
        migrations.AddConstraint(
            model_name="slice",
            constraint=models.UniqueConstraint(fields=("node", "index"), name="slice_index_unique_per_node"),
        ),
        migrations.AddConstraint(
            model_name="slice",
            constraint=models.CheckConstraint(
                condition=models.Q(("mru__gt", 0), ("sru__gte", 0)), name="slice_sizes_not_negative"
            ),
        ),
        migrations.AddIndex(
            model_name="hold",
            index=models.Index(
                condition=models.Q(("ended_at__isnull", True)), fields=["expires_at"], name="hold_open_expiry"
            ),
        ),
        migrations.AddIndex(
            model_name="hold",
            index=models.Index(
                condition=models.Q(("ended_at__isnull", True)), fields=["node", "expires_at"], name="hold_open_node"
            ),
        ),
        migrations.AddConstraint(
            model_name="hold",
            constraint=models.UniqueConstraint(
                condition=models.Q(("ended_at__isnull", True)), fields=("slice",), name="one_open_hold_per_slice"
            ),
        ),
        migrations.AddConstraint(
            model_name="hold",
            constraint=models.CheckConstraint(
                condition=models.Q(("expires_at__gt", models.F("created_at"))), name="hold_expires_after_made"
            ),
        ),
        migrations.AddConstraint(
            model_name="hold",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("ended_at__isnull", True), ("end", "")),
                    models.Q(("ended_at__isnull", False), models.Q(("end", ""), _negated=True)),
                    _connector="OR",
                ),
                name="hold_end_with_its_time",
            ),
        ),
        migrations.AddIndex(
            model_name="deployment",
            index=models.Index(fields=["state", "cause"], name="deployment_state_cause"),
        ),
        migrations.AddConstraint(
            model_name="deployment",
            constraint=models.CheckConstraint(
                condition=models.Q(("mru__gte", 0), ("sru__gte", 0)), name="deployment_sizes_not_negative"
            ),
        ),
        migrations.AddConstraint(
            model_name="deployment",
            constraint=models.UniqueConstraint(
                condition=models.Q(("marketplace_id", ""), _negated=True),
                fields=("marketplace_id",),
                name="one_deployment_per_marketplace_id",
            ),
        ),
        migrations.AddConstraint(
            model_name="deployment",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "deployed")),
                fields=("node", "slice_index"),
                name="one_live_deployment_per_slice",
            ),
        ),
        migrations.AddIndex(
            model_name="snapshotfigures",
            index=models.Index(fields=["scope", "subject", "snapshot"], name="snapshot_series"),
        ),
    ]
