"""A node keeps its latest refused reading and why (issue 43): the node page says it, beside the last good one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0011_operator_answers")]

    operations = [
        migrations.AddField(
            model_name="node",
            name="refused_reading",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
        migrations.AddField(
            model_name="node",
            name="refused_reading_by",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="node",
            name="refused_reading_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
