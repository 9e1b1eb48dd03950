"""dashboard.checks: `migrate` refuses a database part-way through migrations that a squash replaced."""

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from dashboard.checks import part_applied_squashes, squashes_whole

SQUASH = ("dashboard", "0004_zos_rules_and_lessons")
REPLACED = [("dashboard", "0004_zos_cache"), ("dashboard", "0005_farm_ips_public_ipv4_gpus")]


def test_a_squash_with_all_or_none_of_its_migrations_applied_passes():
    squashes = {SQUASH: REPLACED}
    assert part_applied_squashes(set(), squashes) == []
    assert part_applied_squashes(set(REPLACED), squashes) == []
    assert part_applied_squashes({REPLACED[0], SQUASH}, squashes) == []  # recorded as applied: done


def test_a_squash_with_some_of_its_migrations_applied_is_named_with_what_is_missing():
    (words,) = part_applied_squashes({REPLACED[0]}, {SQUASH: REPLACED})
    assert words == (
        "dashboard.0004_zos_rules_and_lessons: 1 of the 2 migrations it replaces are applied "
        "(not 0005_farm_ips_public_ipv4_gpus)"
    )


@pytest.mark.django_db
def test_the_suites_database_is_whole_and_a_part_way_one_is_refused_with_what_to_do():
    assert squashes_whole(databases=["default"]) == []
    # As a database that stopped at 0012_node_refused_reading before this squash would read.
    MigrationRecorder.Migration.objects.filter(app="dashboard", name__in=[SQUASH[1], "0013_lesson_evidence"]).delete()
    (error,) = squashes_whole(databases=["default"])
    assert error.id == "dashboard.E001"
    assert "0004_zos_rules_and_lessons: 9 of the 10 migrations it replaces are applied (not 0013_lesson_evidence)" in (
        error.msg
    )
    assert "release from before the squash" in error.hint
    assert connection.in_atomic_block  # the deletion is rolled back with the test
