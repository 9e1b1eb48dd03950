"""Node.light becomes three-valued: True (ZOS-light), False (full ZOS), None (not known).

Before this, `light` was read from a `features` object no Grid Proxy sends (today's proxy sends a list of
names), so a False read from the real proxy meant "not said", not "full ZOS". Those become None here: the
next reading (the fleet watch, a re-register, onboarding) says which they are. True stays True.
"""

from django.db import migrations, models


def unknown_unless_light(apps, schema_editor):
    Node = apps.get_model("dashboard", "Node")
    Node.objects.filter(light=False).update(light=None)


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0008_zos_rules")]

    operations = [
        migrations.AlterField(
            model_name="node",
            name="light",
            field=models.BooleanField(blank=True, default=None, null=True),
        ),
        migrations.RunPython(unknown_unless_light, migrations.RunPython.noop),
    ]
