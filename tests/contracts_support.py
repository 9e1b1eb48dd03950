"""The schemas of dashboard/grid/schemas as validators and Hypothesis strategies, for the contract tests.

Validation is `jsonschema` (Draft 7, the schemas' own draft); generation is `hypothesis-jsonschema`, a
generator nobody here wrote. Its 0.23.1 calls `many.more()`, a Hypothesis internal that Hypothesis 6.15x
replaced by a context manager; `_LegacyMany` gives it that method on top of the new one (the same
decisions, drawn in the same order), only when the installed Hypothesis lacks it.

Its objects are drawn by `_object_schema`, the generator's own `object_schema` with one draw changed
(see there): the same keys and values are possible, but an object no longer wastes the whole document
by drawing an optional key it already holds. Most generated Grid Proxy nodes were thrown away that
way (103 of 109 tries), which made these tests the quick loop's slowest property tests.
"""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Any

import jsonschema
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import utils as conjecture_utils

from dashboard.grid.schemas import schema

_GENERATORS_OBJECT_SCHEMA = None  # hypothesis-jsonschema's own object_schema, once _object_schema replaces it


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


def _object_schema(custom_formats: dict, alphabet, schema: dict) -> st.SearchStrategy[dict]:
    """hypothesis-jsonschema 0.23.1's `object_schema` (MPL-2.0) for the objects these schemas hold (named
    properties, some required, other names allowed or not), with one draw changed; anything else (pattern
    properties, property names, dependencies) is left to the generator's own.

    Once an object holds its required keys, each further key is drawn from any name the schema allows and
    its optional property names at once, filtered to the names not yet in the object. When the branch of
    optional names was picked after all of them were used (a Grid Proxy node has one, `region`), that
    filter could never pass and the whole document was rejected. Here only the optional names not yet
    used are offered, and an object with no name left stops growing (its `many` rejects the element).
    """
    import hypothesis_jsonschema._from_schema as generator

    if {"propertyNames", "patternProperties", "dependencies"} & set(schema):
        return _GENERATORS_OBJECT_SCHEMA(custom_formats, alphabet, schema)
    required = schema.get("required", [])
    min_size = max(len(required), schema.get("minProperties", 0))
    max_size = schema.get("maxProperties", math.inf)
    properties = schema.get("properties", {})
    additional = schema.get("additionalProperties", {})
    from_schema = getattr(generator, "__from_schema")
    for name in sorted(set(properties).union(required)):
        alphabet.check_name_allowed(name)
    optional_names = sorted(set(properties) - set(required))
    any_name = (
        from_schema({"type": "string"}, custom_formats=custom_formats, alphabet=alphabet)
        if additional != generator.FALSEY
        else st.nothing()
    )

    def names_left(out: dict) -> st.SearchStrategy[str]:
        unused = [name for name in optional_names if name not in out]
        return st.one_of([s for s in (any_name, st.sampled_from(unused) if unused else st.nothing()) if not s.is_empty])

    @st.composite
    def from_object_schema(draw: Any) -> dict:
        elements = generator.cu.many(
            draw(st.data()).conjecture_data,
            min_size=min_size,
            max_size=max_size,
            average_size=min(min_size + 5, (min_size + max_size) / 2),
        )
        out: dict = {}
        while elements.more():
            key = next((k for k in required if k not in out), None)
            if key is None:
                left = names_left(out)
                if left.is_empty:
                    elements.reject()
                    continue
                key = draw(left.filter(lambda s: s not in out))
            value_schema = properties.get(key, additional)
            out[key] = draw(from_schema(value_schema, custom_formats=custom_formats, alphabet=alphabet))
        return out

    return from_object_schema()


def _hypothesis_jsonschema():
    import hypothesis_jsonschema._from_schema as generator

    if not hasattr(conjecture_utils.many, "more") and not isinstance(generator.cu, types.SimpleNamespace):
        names = {name: getattr(conjecture_utils, name) for name in dir(conjecture_utils) if not name.startswith("__")}
        generator.cu = types.SimpleNamespace(**{**names, "many": _LegacyMany})
    # `__from_schema` looks `object_schema` up by name on each schema it turns into a strategy.
    global _GENERATORS_OBJECT_SCHEMA
    if generator.object_schema is not _object_schema:
        _GENERATORS_OBJECT_SCHEMA = generator.object_schema
        generator.object_schema = _object_schema
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
    """A strategy for documents the schema admits.

    Built when a test first draws from it, not when its module is imported: turning the schemas into
    strategies costs about 2.5 s, which every xdist worker paid at collection, running the tests or not.
    """
    return st.deferred(lambda: _hypothesis_jsonschema()(schema(family, name)))


def examples(full: int) -> int:
    """A big document's example count: a quarter of the profile's in `make check`, `full` otherwise."""
    active = settings.default.max_examples
    return max(5, min(full, active // 4)) if active < 100 else full
