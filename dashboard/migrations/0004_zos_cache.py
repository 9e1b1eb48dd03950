# Issue 33, item 5: the zos-cache's quota bound and its pool, written with each pool report.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0003_roles"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="zos_cache_sru",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="zos_cache_pool",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
    ]
