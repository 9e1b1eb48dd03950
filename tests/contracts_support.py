"""The schemas of dashboard/grid/schemas as validators and Hypothesis strategies, for the contract tests.

Validation is `jsonschema` (Draft 7, the schemas' own draft); generation is `hypothesis-jsonschema`, a
generator nobody here wrote. Its 0.23.1 calls `many.more()`, a Hypothesis internal that Hypothesis 6.15x
replaced by a context manager; `_LegacyMany` gives it that method on top of the new one (the same
decisions, drawn in the same order), only when the installed Hypothesis lacks it.
"""

from __future__ import annotations

import types
from functools import cache

import jsonschema
from hypothesis import settings
from hypothesis.internal.conjecture import utils as conjecture_utils

from dashboard.grid.schemas import schema


class _LegacyMany:
    def __init__(self, *args, **kwargs):
        self._many = conjecture_utils.many(*args, **kwargs)
        self._many.__enter__()
        self._elements = iter(self._many)
        self._open = True

    def more(self) -> bool:
        if not self._open:
            return False
        try:
            next(self._elements)
            return True
        except StopIteration:
            self._open = False
            self._many.__exit__(None, None, None)
            return False

    def reject(self, why: str | None = None) -> None:
        self._many.reject(why)


def _hypothesis_jsonschema():
    import hypothesis_jsonschema._from_schema as generator

    if not hasattr(conjecture_utils.many, "more") and not isinstance(generator.cu, types.SimpleNamespace):
        names = {name: getattr(conjecture_utils, name) for name in dir(conjecture_utils) if not name.startswith("__")}
        generator.cu = types.SimpleNamespace(**{**names, "many": _LegacyMany})
    from hypothesis_jsonschema import from_schema

    return from_schema


@cache
def validator(family: str, name: str, *, strict: bool = False) -> jsonschema.Draft7Validator:
    document = schema(family, name, strict=strict)
    jsonschema.Draft7Validator.check_schema(document)
    return jsonschema.Draft7Validator(document)


def problems(family: str, name: str, document, *, strict: bool = False) -> list[str]:
    """Every way `document` departs from the schema, each as "path: message" (empty: it conforms)."""
    found = validator(family, name, strict=strict).iter_errors(document)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}" for e in found]


def documents(family: str, name: str):
    """A strategy for documents the schema admits."""
    return _hypothesis_jsonschema()(schema(family, name))


def examples(full: int) -> int:
    """A big document's example count: a quarter of the profile's in `make check`, `full` otherwise."""
    active = settings.default.max_examples
    return max(5, min(full, active // 4)) if active < 100 else full
