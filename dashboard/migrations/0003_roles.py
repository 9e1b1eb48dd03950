"""The two groups, support and admins, with the permissions dashboard.access.roles declares for them."""

from django.db import migrations

from dashboard.access.roles import roles_create, roles_remove
class Migration(migrations.Migration):
    # 0002_roles made the groups and 0008_harden_permissions widened them before the squash (later
    # schema migrations widened them too; their permissions are all in dashboard.access.roles now).
    replaces = [("dashboard", "0002_roles"), ("dashboard", "0008_harden_permissions")]

    dependencies = [
        ("dashboard", "0002_farm_totals_trigger"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(roles_create, roles_remove)]
