"""The farm totals trigger (dashboard.figures.services.farm_totals_trigger): node writes mark their farms changed."""

from django.db import migrations

from dashboard.figures.services.farm_totals_trigger import farm_totals_trigger_create, farm_totals_trigger_drop
class Migration(migrations.Migration):
    # 0013_farm_totals made the trigger (and its tables, now in 0001_tables) before the squash.
    replaces = [("dashboard", "0013_farm_totals")]

    dependencies = [("dashboard", "0001_tables")]

    operations = [migrations.RunPython(farm_totals_trigger_create, farm_totals_trigger_drop)]
