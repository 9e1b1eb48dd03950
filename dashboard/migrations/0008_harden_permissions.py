"""Least privilege: every read view asks for the view permission of what it shows.

0002_roles gave support and admins most of them; this makes sure both groups hold every
view permission the pages ask for (and the capacity samples, which support reads in /admin/),
so an account in either group reads as before and an account in no group reads nothing.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW_PERMISSIONS = [
    "view_node",
    "view_slice",
    "view_deployment",
    "view_job",
    "view_policy",
    "view_auditevent",
    "view_capacitysample",
    "view_observation",
]


def grant_view_permissions(apps, schema_editor):
    # Permissions are normally created after all migrations; a fresh database has none yet.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perms = list(Permission.objects.filter(content_type__app_label="dashboard", codename__in=VIEW_PERMISSIONS))
    for name in ("support", "admins"):
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*perms)


# Found by name by dashboard.roles.roles_restore, like the other migrations that widen a role.
roles_grant = grant_view_permissions


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0007_job_simulate"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    # Going back leaves the permissions granted: 0002_roles granted most of them, and taking one
    # away from a group could lock out people whose access never depended on this migration.
    operations = [migrations.RunPython(grant_view_permissions, migrations.RunPython.noop)]
