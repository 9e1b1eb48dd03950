"""gunicorn.conf.py: X-Forwarded-Proto is believed only with BEHIND_TLS_PROXY=true.

A real gunicorn with production settings, asked over plain HTTP from loopback by a client that
claims HTTPS. Without a TLS proxy the claim must not count: the answer is the redirect to
https:// and no HSTS header (gunicorn's own default trusts loopback and would send HSTS).
"""

import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings

pytestmark = pytest.mark.slow

GUNICORN = Path(settings.BASE_DIR) / ".venv" / "bin" / "gunicorn"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def gunicorn_asked_with_forged_https(tmp_path, **variables) -> requests.Response:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "VAR_DIR": str(tmp_path / "var"),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
        **variables,
    }
    server = subprocess.Popen(
        [str(GUNICORN), "-c", "gunicorn.conf.py", "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                # Anonymous, to a page behind the login: nothing is rendered, nothing is read from the database.
                return requests.get(
                    f"http://127.0.0.1:{port}/jobs/",
                    headers={"X-Forwarded-Proto": "https"},
                    allow_redirects=False,
                    timeout=5,
                )
            except requests.ConnectionError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(20)


@pytest.mark.skipif(not GUNICORN.exists(), reason="gunicorn is not installed in .venv")
def test_it_ignores_a_forwarded_proto_without_a_tls_proxy(tmp_path):
    response = gunicorn_asked_with_forged_https(tmp_path)
    assert (response.status_code, response.headers["Location"]) == (301, f"https://{response.url.split('//')[1]}")
    assert "Strict-Transport-Security" not in response.headers


@pytest.mark.skipif(not GUNICORN.exists(), reason="gunicorn is not installed in .venv")
def test_it_believes_a_forwarded_proto_behind_a_tls_proxy(tmp_path):
    response = gunicorn_asked_with_forged_https(tmp_path, BEHIND_TLS_PROXY="true")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login/")
    assert "Strict-Transport-Security" in response.headers
