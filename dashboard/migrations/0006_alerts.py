"""Alerts (dashboard.alerts): one row per rule and subject; support and admins see them, admins acknowledge."""

import django.db.models.deletion
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

SUPPORT_PERMISSIONS = ["view_alert"]
ADMIN_PERMISSIONS = ["view_alert", "acknowledge_alert"]


def roles_grant(apps, schema_editor):
    """Support sees the alerts, admins also acknowledge them (tests/conftest.py runs it after 0002's roles)."""
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in (("support", SUPPORT_PERMISSIONS), ("admins", ADMIN_PERMISSIONS)):
        group = Group.objects.filter(name=name).first()
        if group is not None:
            group.permissions.add(*Permission.objects.filter(content_type__app_label="dashboard", codename__in=codenames))


def roles_revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perms = Permission.objects.filter(content_type__app_label="dashboard", codename__in=ADMIN_PERMISSIONS)
    for group in Group.objects.filter(name__in=["support", "admins"]):
        group.permissions.remove(*perms)


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0005_api_tokens'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Alert',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rule', models.CharField(max_length=40)),
                ('subject', models.CharField(max_length=80)),
                ('state', models.CharField(choices=[('firing', 'Firing'), ('resolved', 'Resolved')], db_index=True, default='firing', max_length=8)),
                ('since', models.DateTimeField(help_text='When the current state began')),
                ('summary', models.CharField(max_length=300)),
                ('detail', models.TextField(blank=True)),
                ('evaluated_at', models.DateTimeField()),
                ('notified_state', models.CharField(blank=True, default='', max_length=8)),
                ('last_notified_at', models.DateTimeField(blank=True, null=True)),
                ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                ('acknowledged_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-since'],
                'permissions': [('acknowledge_alert', 'Can acknowledge an alert')],
                'constraints': [models.UniqueConstraint(fields=('rule', 'subject'), name='one_alert_per_rule_and_subject')],
            },
        ),
        migrations.RunPython(roles_grant, roles_revoke),
    ]
