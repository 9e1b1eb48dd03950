# Node.node_id becomes Node.grid_id: on every model with a `node` key, `node_id` is that key, so the
# grid's node id needs a name of its own. The column is renamed with it (raw SQL says grid_id too).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0015_farm_map_cells"),
    ]

    operations = [
        migrations.RenameField(model_name="node", old_name="node_id", new_name="grid_id"),
        migrations.AlterModelOptions(
            name="node",
            options={
                "ordering": ["grid_id"],
                "permissions": [
                    ("reregister_node", "Can re-register a node (re-carve its catalog)"),
                    ("precheck_node", "Can run a capacity precheck"),
                    ("bulk_reregister", "Can re-register all stale nodes"),
                    ("deploy_slice", "Can deploy a slice"),
                    ("onboard_nodes", "Can add nodes from the grid"),
                ],
            },
        ),
    ]
