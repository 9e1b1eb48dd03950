"""What the console says for routine answers: one line, not a traceback (issue 25, console noise)."""

import logging
import os
import subprocess
import sys

import pytest
from django.urls import reverse
from kombu import Connection

from config.log_filters import ForbiddenOnOneLine


@pytest.mark.django_db
def test_a_403_logs_one_line_with_the_user_and_the_path(nogroup_client, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = nogroup_client.get(reverse("fleet"))
    assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert [r.getMessage() for r in records] == ["403 forbidden: GET / by nora"]
    assert records[0].exc_info is None and "Traceback" not in caplog.text


@pytest.mark.django_db
def test_a_500_keeps_its_traceback():
    # The filter shapes only 403s: anything else passes as Django made it.
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "django.request", logging.ERROR, __file__, 1, "Internal Server Error: %s", ("/",), sys.exc_info()
        )
    record.status_code = 500
    assert ForbiddenOnOneLine().filter(record) and record.exc_info is not None
    assert record.getMessage() == "Internal Server Error: /"


def test_the_filesystem_broker_says_nothing_about_a_hostname(tmp_path, caplog):
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="kombu.connection"):
        Connection("filesystem://", transport_options=options).info()
    assert "hostname" not in caplog.text


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="Celery warns only a worker run as root")
@pytest.mark.parametrize(("broker", "warned"), [("filesystem://", False), ("redis://127.0.0.1:6379/0", True)])
def test_celerys_superuser_warning_only_where_someone_can_act_on_it(broker, warned, tmp_path):
    # What the worker runs at start-up (celery.apps.worker), in a process of its own with that broker.
    code = "import config.celery\nfrom celery.platforms import check_privileges\ncheck_privileges(['json'])\n"
    env = {**os.environ, "CELERY_BROKER_URL": broker, "VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ("superuser privileges" in done.stderr) is warned
