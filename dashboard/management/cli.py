"""What every operator command shares: its exit statuses, its errors, and how it reads values.

One exit status per kind of error, the same in every command and listed at the end of each `--help`:

    0  done
    1  refused or failed: the request was understood and the answer is no (it does not fit, the grid
       failed, the job failed, a check found something wrong)
    2  usage: the command line is wrong (a bad value, a missing or clashing flag, an unknown node,
       policy, user or token); nothing was done

A command with a status of its own (3: `--wait` gave up while the job keeps running) lists it too.
Values may be negative on the command line (`--mru -31GiB`, `precheck -5`): argparse would take
them for options and answer "expected one argument"; here they reach the command, which says what is
wrong with the value.
"""

from __future__ import annotations

import argparse
import re

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from dashboard.figures.services.figures_settings import figures_settings_differ
from dashboard.models import Node

EXIT_REFUSED = 1
EXIT_USAGE = 2

# argparse's own matcher knows only "-5" and "-.5"; a size is "-31GiB" or "-1.5 TB".
_NEGATIVE_VALUE = re.compile(r"^-\d[\d.,_]*\s*[A-Za-z]*$")
# Grid ids are positive 32-bit integers (TFChain's u32, stored in an integer column).
_GRID_ID_MAX = 2**31 - 1


class ProductCommand(BaseCommand):
    """A BaseCommand whose `--help` ends with its exit statuses and whose parser takes negative values."""

    exit_statuses: dict[int, str] = {
        0: "done",
        EXIT_REFUSED: "refused or failed",
        EXIT_USAGE: "the command line is wrong (nothing was done)",
    }

    # A command that stores figures here (not through the worker) stores nothing under figure-deciding
    # settings other than those the stored figures were computed under (figures.services.figures_settings).
    stores_figures = False

    def figures_stored_here(self, options: dict) -> bool:
        return self.stores_figures

    def execute(self, *args, **options):
        if self.figures_stored_here(options):
            try:
                differ = figures_settings_differ()
            except DatabaseError:
                # The command checks its input first and then says the database is down in its own words.
                differ = None
            if differ:
                raise refused(differ)
        return super().execute(*args, **options)

    def create_parser(self, prog_name, subcommand, **kwargs):
        statuses = "\n".join(f"  {code}  {words}" for code, words in sorted(self.exit_statuses.items()))
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("epilog", f"exit statuses:\n{statuses}")
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser._negative_number_matcher = _NEGATIVE_VALUE  # argparse offers no public hook
        return parser


def usage_error(message: str) -> CommandError:
    return CommandError(message, returncode=EXIT_USAGE)


def refused(message: str) -> CommandError:
    return CommandError(message, returncode=EXIT_REFUSED)


def grid_id(text: str) -> int:
    """argparse `type=` for a node or farm id: a whole number from 1 to 2**31-1."""
    raw = str(text).strip()
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= _GRID_ID_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a grid id (a whole number from 1 to {_GRID_ID_MAX})")
    return int(raw)


def timeout_argument(parser, *, default: float) -> None:
    """--timeout S: how long --wait follows a job before it gives up."""
    parser.add_argument(
        "--timeout",
        type=float,
        default=default,
        metavar="S",
        help=f"with --wait: give up after S seconds (default {default:g})",
    )


def not_registered(node_id: int) -> CommandError:
    """An unknown node is a usage error; the suggestion is only for an id the grid could have."""
    return usage_error(f"node {node_id} is not registered; run manage.py node_register {node_id}")


def registered_node(node_id: int) -> Node:
    """The registered node of this grid id; an unknown one is a usage error (`not_registered`)."""
    node = Node.objects.filter(grid_id=node_id).first()
    if node is None:
        raise not_registered(node_id)
    return node
