"""Strict readers for settings taken from the environment.

A malformed value stops start-up with a message naming the variable; it is never
silently read as a default (a typo'd DEBUG must not become False in production).
"""

import math
import os

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
