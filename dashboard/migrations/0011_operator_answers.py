# Issue 45: how a node's build was heard, and its contracts in grace as the slice audit read them.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dashboard', '0010_pools_refused'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='contracts_read_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='grace_contracts',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='zos_version_source',
            field=models.CharField(blank=True, default='', max_length=16),
        ),
    ]
