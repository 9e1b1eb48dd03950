"""The farm totals trigger: after any statement that inserts, updates or deletes nodes, their farms
are marked changed (FarmTotalsChanged), in the same transaction, whoever wrote them.

Created by migration 0002_farm_totals_trigger (it stood in 0013_farm_totals before the first squash);
figures.services.farm_totals sums the marked farms again. No Django import: a migration calls these
with its schema editor.
"""

from __future__ import annotations

FARM_TOTALS_TRIGGER_CREATE = """
CREATE FUNCTION dashboard_node_farms_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO dashboard_farmtotalschanged (farm_id) SELECT DISTINCT farm_id FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO dashboard_farmtotalschanged (farm_id) SELECT DISTINCT farm_id FROM old_rows;
    ELSE
        INSERT INTO dashboard_farmtotalschanged (farm_id)
            SELECT farm_id FROM new_rows UNION SELECT farm_id FROM old_rows;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER node_farms_changed_insert AFTER INSERT ON dashboard_node
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dashboard_node_farms_changed();
CREATE TRIGGER node_farms_changed_update AFTER UPDATE ON dashboard_node
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dashboard_node_farms_changed();
CREATE TRIGGER node_farms_changed_delete AFTER DELETE ON dashboard_node
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dashboard_node_farms_changed();
"""
FARM_TOTALS_TRIGGER_DROP = """
DROP TRIGGER IF EXISTS node_farms_changed_insert ON dashboard_node;
DROP TRIGGER IF EXISTS node_farms_changed_update ON dashboard_node;
DROP TRIGGER IF EXISTS node_farms_changed_delete ON dashboard_node;
DROP FUNCTION IF EXISTS dashboard_node_farms_changed();
"""


def farm_totals_trigger_create(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(FARM_TOTALS_TRIGGER_CREATE)


def farm_totals_trigger_drop(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(FARM_TOTALS_TRIGGER_DROP)
