"""The columns and tables 0004_zos_cache .. 0013_lesson_evidence added, in one migration (issue 46).

It replaces those ten (ZOS's cache and its rules, public IPv4s and GPUs, the odds and probes, the
lessons' doubt and evidence, the operators' answers, refused readings): a database that applied them
all is marked as having applied this one and runs nothing; one that applied none runs it in full. A
database that applied only some must reach 0013_lesson_evidence first, on a release from before this
squash (docs/production.md). 0009's data repair (`unknown_unless_light`: a node's `light` read as False
became None, not known) is not here: a fresh database has no nodes to repair, a database that had them
has run it, and one at 0003_roles gets the column as the repair left it, None for every node.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

CAUSES = [
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
    ("public-ip", "No free public IPv4 (farm)"),
    ("gpu", "GPU needs a rented node"),
    ("cache-missing", "Node without its zos-cache"),
    ("cache-full", "zos-cache full (transient)"),
    ("unknown", "Unknown"),
]
STATES = [
    ("deploying", "Deploying"),
    ("deployed", "Deployed"),
    ("failed", "Failed"),
    ("refused", "Refused by precheck"),
    ("deleted", "Deleted"),
    ("probed", "Probe refused (it teaches)"),
]
STANDINGS = [
    ("group", "Taught its group"),
    ("node", "Its node alone, waiting for a second source"),
    ("held", "Held aside: not plausible"),
]


def _added(model_name: str, **fields: models.Field) -> list[migrations.AddField]:
    return [migrations.AddField(model_name=model_name, name=name, field=field) for name, field in fields.items()]


class Migration(migrations.Migration):
    replaces = [
        ("dashboard", "0004_zos_cache"),
        ("dashboard", "0005_farm_ips_public_ipv4_gpus"),
        ("dashboard", "0006_odds_prior_probes"),
        ("dashboard", "0007_lesson_doubt"),
        ("dashboard", "0008_zos_rules"),
        ("dashboard", "0009_node_light_unknown"),
        ("dashboard", "0010_pools_refused"),
        ("dashboard", "0011_operator_answers"),
        ("dashboard", "0012_node_refused_reading"),
        ("dashboard", "0013_lesson_evidence"),
    ]

    dependencies = [
        ("dashboard", "0003_roles"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="FarmIps",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("farm_id", models.PositiveIntegerField(unique=True)),
                ("farm_name", models.CharField(blank=True, max_length=128)),
                ("ips", models.JSONField(default=list, help_text='[{"ip", "gateway", "contract_id"}], as read')),
                ("read_at", models.DateTimeField()),
                ("free_readings", models.JSONField(blank=True, default=list)),
            ],
            options={
                "verbose_name": "farm public IPs",
                "verbose_name_plural": "farms' public IPs",
            },
        ),
        migrations.CreateModel(
            name="ProbeProposal",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("proposed_at", models.DateTimeField(db_index=True)),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="dashboard.node"
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
                "indexes": [models.Index(fields=["node", "proposed_at"], name="probe_proposal_node_at")],
            },
        ),
        *_added(
            "node",
            gpus=models.PositiveSmallIntegerField(default=0, help_text="GPUs the node reports (the proxy's num_gpu)"),
            light=models.BooleanField(blank=True, default=None, null=True),
            zos_cache_sru=models.BigIntegerField(blank=True, null=True),
            zos_cache_pool=models.PositiveSmallIntegerField(blank=True, null=True),
            zos_cache_missing=models.CharField(blank=True, default="", max_length=120),
            zos_cache_missing_at=models.DateTimeField(blank=True, null=True),
            zos_cache_missing_source=models.CharField(blank=True, default="", max_length=40),
            zos_version_source=models.CharField(blank=True, default="", max_length=16),
            pools_refused=models.CharField(blank=True, max_length=300),
            pools_refused_at=models.DateTimeField(blank=True, null=True),
            contracts_read_at=models.DateTimeField(blank=True, null=True),
            grace_contracts=models.PositiveIntegerField(blank=True, null=True),
            refused_reading=models.CharField(blank=True, default="", max_length=300),
            refused_reading_by=models.CharField(blank=True, default="", max_length=16),
            refused_reading_at=models.DateTimeField(blank=True, null=True),
        ),
        *_added(
            "deployment",
            gpus=models.PositiveSmallIntegerField(default=0, help_text="GPUs the VM asked of its node"),
            public_ipv4=models.PositiveSmallIntegerField(default=0, help_text="Public IPv4s the VM asked of its farm"),
            odds=models.FloatField(blank=True, null=True),
        ),
        # New choices only: no change to the table.
        migrations.AlterField(
            model_name="deployment",
            name="cause",
            field=models.CharField(blank=True, choices=CAUSES, db_index=True, default="", max_length=16),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="state",
            field=models.CharField(choices=STATES, db_index=True, default="deploying", max_length=10),
        ),
        *_added("hold", public_ipv4=models.PositiveSmallIntegerField(default=0)),
        *_added(
            "policy",
            gpu_slices=models.BooleanField(default=False),
            ipv4_addon=models.BooleanField(default=False),
            public_ipv4=models.PositiveSmallIntegerField(default=0),
        ),
        *_added(
            "memorylesson",
            on_prior=models.BooleanField(default=False),
            line_sd=models.BigIntegerField(default=0),
            per_vm_doubt=models.BigIntegerField(default=0),
        ),
        *_added(
            "observation",
            group_actual_mru=models.BigIntegerField(blank=True, null=True),
            held_why=models.TextField(blank=True, help_text="Why it is held aside, in plain words"),
            recorded_at=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
            reported_by=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
            standing=models.CharField(choices=STANDINGS, default="group", max_length=8),
            token=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="dashboard.apitoken",
            ),
            vouched_by=models.CharField(blank=True, max_length=40),
        ),
    ]
