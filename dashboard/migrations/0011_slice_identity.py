"""Slice numbers are never reused: each node counts from after every number it used so far,
the slices it holds and the numbers its deployment records name (a failed deploy's slice may be gone)."""

from django.db import migrations, models
from django.db.models import IntegerField, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest


def numbers_used(apps, schema_editor):
    Node = apps.get_model("dashboard", "Node")
    Slice = apps.get_model("dashboard", "Slice")
    Deployment = apps.get_model("dashboard", "Deployment")

    def highest(model, field):
        rows = model.objects.filter(node=OuterRef("pk")).order_by().values("node").annotate(top=Max(field)).values("top")
        return Coalesce(Subquery(rows, output_field=IntegerField()), Value(-1))

    Node.objects.update(slice_index_next=Greatest(highest(Slice, "index"), highest(Deployment, "slice_index")) + 1)


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0010_onboarding"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="slice_index_next",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(numbers_used, migrations.RunPython.noop),
    ]
