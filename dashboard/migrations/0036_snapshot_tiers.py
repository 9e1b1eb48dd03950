# Issue 34: the snapshots keep deployable in its tiers (selectors.tiers), as the fleet page counts them.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0035_memory_lessons"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshotfigures",
            name=name,
            field=models.PositiveIntegerField(default=0),
        )
        for name in ("deployable_now", "deployable_after_wake", "deployable_blocked", "deployable_closed")
    ]
