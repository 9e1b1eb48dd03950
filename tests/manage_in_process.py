"""`manage.py ARGS` as an operator runs it, in this process: what it writes and the status it exits with.

ManagementUtility takes the same path as manage.py (argparse with its own refusals, run_from_argv
turning a CommandError into one line on stderr and its exit status) without the ~2 s of CPU a new
interpreter and Django start-up cost. Only what a separate process adds (another environment, no
database at all, a server left running) needs a real subprocess.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from io import StringIO
from unittest import mock

from django.core.management import ManagementUtility
from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def manage(*args: str) -> Run:
    """Run `manage.py ARGS`; its exit status is 0 unless it exits otherwise (SystemExit)."""
    out, err = StringIO(), StringIO()
    returncode = 0
    # run_from_argv closes every connection when it is done: the test's own (its transaction) stays open.
    with mock.patch.object(connections, "close_all"), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ManagementUtility(["manage.py", *args]).execute()
        except SystemExit as exited:
            code = exited.code
            returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return Run(returncode, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def database_unreachable():
    """Every connection attempt fails as it does with nothing listening (Django's OperationalError)."""

    def refuse(self):
        raise OperationalError('connection to server at "127.0.0.1", port 1 failed: Connection refused')

    with mock.patch.object(BaseDatabaseWrapper, "ensure_connection", refuse):
        yield
