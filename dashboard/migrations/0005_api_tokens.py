"""API tokens, the marketplace's deployment id on Deployment, jobs requested through the API,
and the admins' right to manage tokens (support keeps reading only)."""

import django.db.models.deletion
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

ADMIN_PERMISSIONS = ["manage_apitoken", "view_apitoken"]


def roles_grant(apps, schema_editor):
    """Give the admins group the token permissions (tests/conftest.py runs it after 0002's roles)."""
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    admins = Group.objects.filter(name="admins").first()
    if admins is not None:
        admins.permissions.add(*Permission.objects.filter(content_type__app_label="dashboard", codename__in=ADMIN_PERMISSIONS))


def roles_revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for admins in Group.objects.filter(name="admins"):
        admins.permissions.remove(*Permission.objects.filter(content_type__app_label="dashboard", codename__in=ADMIN_PERMISSIONS))


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0004_observations'),
        ('dashboard', '0002_roles'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=80)),
                ('prefix', models.CharField(help_text="The token's first characters, to recognise it", max_length=16)),
                ('key_hash', models.CharField(help_text='SHA-256 of the token, hex', max_length=64, unique=True)),
                ('scopes', models.JSONField(default=list, help_text='Some of read, precheck, report, act')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
                'permissions': [('manage_apitoken', 'Can create and revoke API tokens for any user')],
            },
        ),
        migrations.AddField(
            model_name='deployment',
            name='marketplace_id',
            field=models.CharField(blank=True, default='', max_length=128),
        ),
        migrations.AlterField(
            model_name='job',
            name='source',
            field=models.CharField(choices=[('web', 'Web'), ('command', 'Command'), ('admin', 'Admin'), ('api', 'API')], default='web', max_length=8),
        ),
        migrations.AddConstraint(
            model_name='deployment',
            constraint=models.UniqueConstraint(condition=models.Q(('marketplace_id', ''), _negated=True), fields=('marketplace_id',), name='one_deployment_per_marketplace_id'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='created_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='revoked_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='user',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='apitoken',
            constraint=models.UniqueConstraint(condition=models.Q(('revoked_at__isnull', True)), fields=('user', 'name'), name='api_token_name_unique_per_user'),
        ),
        migrations.RunPython(roles_grant, roles_revoke),
    ]
