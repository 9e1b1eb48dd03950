"""The two roles: admins act (re-register, bulk jobs, policy); support reads everything."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ADMIN_PERMISSIONS = [
    "reregister_node",
    "precheck_node",
    "bulk_reregister",
    "deploy_slice",
    "change_policy",
    "add_policy",
]
SUPPORT_PERMISSIONS = [
    "view_node",
    "view_slice",
    "view_deployment",
    "view_job",
    "view_policy",
    "view_auditevent",
]


def create_roles(apps, schema_editor):
    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="dashboard")
    admins, _ = Group.objects.get_or_create(name="admins")
    support, _ = Group.objects.get_or_create(name="support")
    support.permissions.set(perms.filter(codename__in=SUPPORT_PERMISSIONS))
    admins.permissions.set(perms.filter(codename__in=SUPPORT_PERMISSIONS + ADMIN_PERMISSIONS))


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["admins", "support"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
