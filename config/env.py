"""Strict readers for settings taken from the environment.

A malformed value stops start-up with a message naming the variable; it is never
silently read as a default (a typo'd DEBUG must not become False in production).
"""

import math
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use one of true/false, 1/0, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a finite number of at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value


def env_ids(name: str) -> tuple[int, ...]:
    """A comma list of grid ids (twins, nodes): each a whole number from 1 to 2**32 - 1; empty when unset."""
    ids = []
    for item in env_list(name, []):
        try:
            value = int(item)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not a whole number (a comma list of ids)") from None
        if not 1 <= value <= 2**32 - 1:
            raise ImproperlyConfigured(f"{name}: {value} is not a grid id (1 to 4294967295)")
        ids.append(value)
    return tuple(dict.fromkeys(ids))


# `make run` keeps what it decides for the demo here (under VAR_DIR), so every process of the embedded
# default reads the same values: web, worker, beat and a `manage.py` typed in another terminal.
RUN_SETTINGS_FILE = "run.env"


def run_settings_read(path) -> dict[str, str]:
    """The NAME=value lines of a run settings file (blank lines and # comments skipped); {} when absent."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip().isidentifier():
            raise ImproperlyConfigured(f"{path}, line {number}: {line!r} is not NAME=value")
        values[name.strip()] = value.strip()
    return values


def run_settings_load(path) -> dict[str, str]:
    """Put the run settings file's values into the environment where the environment has none (it wins).

    Returns the values taken from the file."""
    taken = {}
    for name, value in run_settings_read(path).items():
        if name not in os.environ:
            os.environ[name] = value
            taken[name] = value
    return taken
