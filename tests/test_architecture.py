"""The layers, read from the source: who may import whom, no import cycle, small service modules.

Imports inside functions count too: they are how a cycle hides. See README "Where things are".
"""

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dashboard"
# 400 before ruff laid the code out one argument a line where it is long; the same modules, 2% taller.
SERVICE_MODULE_MAX_LINES = 420
# Any module of dashboard/ (migrations excepted): past this it mixes concerns; cut it by concern.
MODULE_MAX_LINES = 600
# What is stored stays in one module, and models.py is that module.
LONG_MODULES = {"dashboard/models.py"}
# Over the limit, owned by other work now, and held where they stand until they are cut.
NOT_YET_CUT: dict[str, int] = {}
# A function of the product (its docstring included) past this does several things: split it by concern.
FUNCTION_MAX_LINES = 60
# The product's code: the app, the simulated world, start-up and the scripts.
PRODUCT = [ROOT / "dashboard", ROOT / "sim", ROOT / "config", ROOT / "scripts"]
# Over the limit, owned by other work now (the memory model, outcomes, the simulated month), and held at
# their length until they are split. This list only shrinks: an entry leaves when its function is cut (a
# test below says so), and a function not named here never joins it.
LONG_FUNCTIONS_NOT_YET_SPLIT: dict[str, int] = {}
# The suite and the measurements: a table-driven test reads best whole, so they keep the older, looser cap.
TEST_FUNCTION_MAX_LINES = 80


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path
    for path in PACKAGE.rglob("*.py")
    if "migrations" not in path.parts and "management" not in path.parts
}


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of this file's syntax tree (ast.walk's order), parsed once for the module's tests: half
    of them read the same files (module_trees_forgotten drops them when the module is done)."""
    return tuple(ast.walk(ast.parse(path.read_text())))


def _walked(source: str | Path) -> tuple[ast.AST, ...]:
    """The nodes of a file (parsed once, _nodes) or of a source text (a scan's own test)."""
    return _nodes(source) if isinstance(source, Path) else tuple(ast.walk(ast.parse(source)))


@pytest.fixture(autouse=True, scope="module")
def module_trees_forgotten():
    yield
    _nodes.cache_clear()
    _graph.cache_clear()


def _imports(path: Path) -> set[str]:
    """The dashboard modules this file imports, anywhere in it (`from x import y` counts y if it is a module)."""
    found = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("dashboard"))
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dashboard") and node.level == 0
        ):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in MODULES else node.module)
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Which of our modules each of our modules imports; built when a test first asks (not at collection,
    which every xdist worker does)."""
    return {name: _imports(path) & MODULES.keys() for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in _graph().get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = _component_popped(stack, on_stack, root=v)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(_graph()):
        if v not in index:
            visit(v)
    return found


def _component_popped(stack: list[str], on_stack: set[str], *, root: str) -> list[str]:
    """Tarjan's last step: the modules on the stack down to `root`, taken off it, are one component."""
    component = []
    while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == root:
            return component


def test_no_module_of_ours_imports_itself_back_in_a_cycle():
    assert _cycles() == []


def _capacity_modules() -> dict[str, set[str]]:
    return {name: edges for name, edges in _graph().items() if name.split(".")[:2] == ["dashboard", "capacity"]}


def test_the_capacity_rules_import_nothing_of_ours():
    parts = _capacity_modules()
    assert len(parts) > 1  # the package and its parts
    for name, edges in parts.items():
        outside = {e for e in edges if not e.startswith("dashboard.capacity.")}
        assert not outside, f"{name} imports {sorted(outside)}"
    # The pure rules outside the arithmetic joined it (the catalog, its audit, outcomes, node events).
    assert {"catalog", "catalog_audit", "outcomes", "node_events"} <= {name.split(".")[-1] for name in parts}


def test_the_capacity_rules_need_no_django():
    # Pure: plain values in, plain values out, testable without settings or a database. A rule that reads
    # a setting lives in its room beside the one reader (figures.closure, figures.warning, nodes.reading_age).
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((PACKAGE / "capacity").rglob("*.py"))
        for name in _runtime_imports(path)
        if name == "django" or name.startswith("django.")
    ]
    assert found == []


def test_the_capacity_arithmetic_needs_no_sentence():
    # The sentences live in words.py; sizes, placement, policy and lessons are figures alone,
    # and words.py needs nothing but the sizes (it is handed the figures it says).
    for part in ("sizes", "placement", "policy", "lessons"):
        assert "dashboard.capacity.words" not in _graph()[f"dashboard.capacity.{part}"]
    assert _graph()["dashboard.capacity.words"] == {"dashboard.capacity.sizes"}


def test_the_grid_knows_only_the_capacity_types():
    for name, edges in _graph().items():
        if name.startswith("dashboard.grid"):
            outside = {e for e in edges if not e.startswith("dashboard.grid") and e != "dashboard.capacity"}
            assert not outside, f"{name} imports {sorted(outside)}"


# The concept rooms, lowest first: a room's services call the services of lower rooms only (a policy edit
# refreshes figures; a figure never edits a policy). Reads are the floor every room stands on: any room may
# read any room's selectors, and no selector calls a service. docs/architecture.md names each room.
ROOMS = ["access", "jobs", "figures", "alerts", "lessons", "nodes", "policies", "catalogs", "deployments"]


def _room(name: str) -> str:
    return name.split(".")[1]


def _layer(name: str) -> str | None:
    """The layer ("services" or "selectors") of a module of a room's services or selectors, else None."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[1] in ROOMS and parts[2] in ("services", "selectors") else None


def test_a_rooms_services_call_only_the_services_of_lower_rooms():
    found = [
        f"{name} -> {e}"
        for name, edges in _graph().items()
        if _layer(name) == "services"
        for e in edges
        if _layer(e) == "services" and ROOMS.index(_room(e)) > ROOMS.index(_room(name))
    ]
    assert found == []


def test_every_room_is_on_the_map_of_rooms():
    # A folder of dashboard/ is a room in ROOMS, the pure rules (capacity), the outside world (grid) or a door.
    doors = {"api", "views", "management", "migrations", "templatetags", "capacity", "grid"}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(ROOMS) | doors, folders ^ (set(ROOMS) | doors)


@pytest.mark.parametrize("layer", ["selectors", "dashboard.models", "dashboard.grid", "dashboard.capacity"])
def test_reads_and_lower_layers_never_import_the_services(layer):
    for name, edges in _graph().items():
        if name == layer or name.startswith(layer + ".") or _layer(name) == layer:
            services = {e for e in edges if _layer(e) == "services"}
            assert not services, f"{name} imports {sorted(services)}"


def test_the_job_life_cycle_knows_no_job_kind():
    # It reads what each kind takes from the declarations (dashboard.jobs.kinds), never what a kind runs.
    assert not {e for e in _graph()["dashboard.jobs.services.jobs"] if _layer(e) == "services"} - {
        "dashboard.access.services.audit_trail",
        "dashboard.jobs.services.grid_requests",
    }
    for runs_any_kind in ("dashboard.jobs.services.job_run", "dashboard.jobs.services.job_reaper"):
        assert not {e for e in _graph()[runs_any_kind] if _layer(e) == "services"} - {
            "dashboard.jobs.services.jobs",
        }


def test_the_job_kinds_sit_below_the_models_and_name_their_runners_without_importing_them():
    for name, edges in _graph().items():
        if name.startswith("dashboard.jobs.kinds"):
            above = {e for e in edges if e.split(".")[1] in ("models", "views", "api") or _layer(e)}
            assert not above, f"{name} imports {sorted(above)}"


def test_service_modules_stay_small():
    for name, path in MODULES.items():
        if _layer(name) == "services":
            lines = len(path.read_text().splitlines())
            assert lines <= SERVICE_MODULE_MAX_LINES, f"{name} has {lines} lines"


def test_the_product_never_imports_its_start_up():
    # config/ (settings, URLs, the Celery and WSGI apps) starts the product; the product reads settings
    # through django.conf and reaches the Celery app as celery's current_app.
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in _nodes(path)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if name == "config" or name.startswith("config.")
    ]
    assert found == []


def _runtime_imports(path: Path) -> set[str]:
    """Every module name this file imports at run time (an `if TYPE_CHECKING:` block names types only)."""
    nodes = _nodes(path)
    typing_only = {
        id(inner)
        for node in nodes
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    names = set()
    for node in nodes:
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_production_code_never_imports_the_simulated_world():
    # sim/ (the simulated grid and the month of traffic) is chosen by name in the settings
    # (SIMULATED_GRID, POLICY_TRIAL_MONTH): nothing the product runs can lean on the simulator's insides.
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for folder in (PACKAGE, ROOT / "config")
        for path in sorted(folder.rglob("*.py"))
        for name in _runtime_imports(path)
        if name == "sim" or name.startswith("sim.")
    ]
    assert found == []


def test_the_package_has_at_most_twelve_top_level_modules():
    # Django's own files and the few every room shares; everything else lives in a room (docs/architecture.md).
    top = sorted(p.name for p in (ROOT / "dashboard").glob("*.py"))
    assert len(top) <= 12, top


def test_no_module_is_over_600_lines_but_the_models():
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if "migrations" in path.parts or where in LONG_MODULES:
            continue
        lines = len(path.read_text().splitlines())
        assert lines <= NOT_YET_CUT.get(where, MODULE_MAX_LINES), f"{where} has {lines} lines; cut it by concern"


def _function_lengths(roots: list[Path]) -> dict[str, int]:
    """Every function's length in lines, its docstring included, as `path:name` (migrations excepted)."""
    lengths = {}
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in _nodes(path):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(ROOT)}:{node.name}"
                lengths[where] = max(lengths.get(where, 0), node.end_lineno - node.lineno + 1)
    return lengths


def test_no_function_of_the_product_is_over_60_lines():
    for where, lines in _function_lengths(PRODUCT).items():
        limit = LONG_FUNCTIONS_NOT_YET_SPLIT.get(where, FUNCTION_MAX_LINES)
        assert lines <= limit, f"{where} has {lines} lines; split it by concern"


def test_the_long_functions_list_names_only_functions_still_too_long():
    # A split function leaves the list, so the list cannot grow back into an allowance.
    lengths = _function_lengths(PRODUCT)
    cut = sorted(where for where in LONG_FUNCTIONS_NOT_YET_SPLIT if lengths.get(where, 0) <= FUNCTION_MAX_LINES)
    assert cut == [], f"split, so take them off LONG_FUNCTIONS_NOT_YET_SPLIT: {cut}"


@pytest.mark.slow  # it parses every file of the suite and the bench, which no other test here reads
def test_no_function_of_the_suite_or_the_measurements_is_over_80_lines():
    for where, lines in _function_lengths([ROOT / "bench", ROOT / "tests"]).items():
        assert lines <= TEST_FUNCTION_MAX_LINES, f"{where} has {lines} lines; split it by concern"


# What a selector may not do: a write or a lock through the ORM, or SQL text that writes or locks.
WRITING_CALLS = {
    "save",
    "delete",
    "_raw_delete",
    "create",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
    "select_for_update",
}
WRITING_SQL = re.compile(
    r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM|FOR\s+(NO\s+KEY\s+)?UPDATE|FOR\s+SHARE|LOCK\s+TABLE|TRUNCATE)\b"
)


def writes_in(source: str) -> list[str]:
    """Each write or lock in this source, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            # QuerySet.update takes the fields as keywords; dict.update (a read's own dicts) a mapping.
            if name in WRITING_CALLS or (name == "update" and (node.keywords or not node.args)):
                found.append(f"{node.lineno}: .{name}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and WRITING_SQL.search(node.value):
            found.append(f"{node.lineno}: SQL {WRITING_SQL.search(node.value).group(0)!r}")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_the_scan_for_writes_finds_each_kind():
    source = """
Node.objects.filter(pk=1).update(status="down")
node.save()
FarmTotals.objects.select_for_update().filter(farm_id=1)
marks._raw_delete(db)
cursor.execute(f"UPDATE {table} SET x = 1")
cursor.execute("SELECT 1 FOR UPDATE")
plain = {}
plain.update(other)
"""
    assert [line.split(": ")[0] for line in writes_in(source)] == ["2", "3", "4", "5", "6", "7"]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.glob("*/selectors/*.py")), ids=lambda p: f"{p.parent.parent.name}.{p.name}"
)
def test_no_selector_writes_or_locks(path):
    assert writes_in(path.read_text()) == [], f"{path.relative_to(ROOT)} writes (selectors only read)"


def _audit_rows_made(source: str) -> list[str]:
    """Where this source makes audit-trail rows: AuditEvent(...) or AuditEvent.objects.create/bulk_create/..."""
    return _audit_rows_among(ast.walk(ast.parse(source)))


def _audit_rows_among(nodes) -> list[str]:
    found = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "AuditEvent":
            found.append(f"{node.lineno}: AuditEvent()")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in WRITING_CALLS
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "objects"
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "AuditEvent"
        ):
            found.append(f"{node.lineno}: AuditEvent.objects.{func.attr}()")
    return found


def test_the_scan_for_audit_rows_finds_each_way_to_make_one():
    source = """
AuditEvent.objects.create(action="x")
AuditEvent.objects.bulk_create([AuditEvent(action="x")])
AuditEvent.objects.filter(action="x").exists()
"""
    assert [line.split(": ")[0] for line in _audit_rows_made(source)] == ["2", "3", "3"]


def test_the_audit_trail_is_written_in_one_module():
    # One writer for the trail (access.services.audit_trail): every door calls audit_record / audit_records.
    writers = {
        str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and _audit_rows_among(_nodes(path))
    }
    assert writers == {"dashboard/access/services/audit_trail.py"}


def _node_store_calls(source: str | Path) -> list[str]:
    """Where this source calls figures.services.figures' store or lock: figures_refresh(...), nodes_lock(...), by name or attribute."""
    found = []
    for node in _walked(source):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in NODE_STORE:
                found.append(f"{node.lineno}: {name}()")
    return found


# figures.services.figures' store of a node's figures and its lock of the nodes, reached through figures.services.node_writes.
NODE_STORE = {"figures_refresh", "nodes_lock"}


def test_the_scan_for_the_node_store_finds_each_way_to_call_it():
    source = """
figures_refresh([1])
figures.nodes_lock([1]); figures_refresh_all()
node_writes([1])
"""
    assert [line.split(": ")[0] for line in _node_store_calls(source)] == ["2", "3"]


def test_nodes_are_written_through_one_block():
    # One writer of a node's figures (figures.services.node_writes): every writer locks and refreshes in its block.
    # figures.services.figures defines the store and the lock (figures_refresh locks its own batches; figures_refresh_all,
    # the repair of every node, stores a batch a transaction through it).
    writers = {
        str(path.relative_to(ROOT))
        for room in PRODUCT
        for path in room.rglob("*.py")
        if "migrations" not in path.parts and _node_store_calls(path)
    }
    assert writers == {"dashboard/figures/services/figures.py", "dashboard/figures/services/node_writes.py"}


# One database everywhere (PostgreSQL, embedded or not): no branch on the vendor, no SQLite path.
# The simulated grid's own store plays the outside world and may keep its SQLite file.
VENDOR_BRANCH = re.compile(r"connection\.vendor|\bsqlite3?\b", re.IGNORECASE)


def test_the_product_has_one_database_path():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(ROOT)
        if "migrations" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if VENDOR_BRANCH.search(line) and not line.lstrip().startswith("SIMGRID_PATH"):
                found.append(f"{where}:{number}: {line.strip()}")
    assert found == [], "a second database path:\n" + "\n".join(found)


def test_every_setting_is_defined_once_and_read_as_settings_x():
    # A default next to a getattr hides a setting from settings.py, where an operator looks for it.
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "getattr(settings," in line
    ]
    assert found == [], "settings read with a default outside settings.py: " + ", ".join(found)


TESTS = ROOT / "tests"


def _test_modules_imported(path: Path) -> set[str]:
    """The test modules (tests/**/test_*.py) this file imports, anywhere in it."""
    found = set()
    for node in _nodes(path):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found.update(
            name for name in names if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
        )
    return found


def test_no_test_module_imports_another():
    # What two test modules share lives in conftest.py, tests/support.py or a helper module of its own:
    # a test module imported by another runs its module-level set-up twice and ties the two together.
    importers = {
        str(path.relative_to(ROOT)): sorted(imported)
        for path in sorted([*TESTS.rglob("*.py"), *(ROOT / "bench").rglob("*.py")])
        if (imported := _test_modules_imported(path))
    }
    assert importers == {}


def test_the_map_names_every_room_and_fits_on_two_screens():
    # The newcomer's map (docs/architecture.md): every package and top-level module of dashboard/ named, short.
    text = (ROOT / "docs" / "architecture.md").read_text()
    rooms = [p for p in (ROOT / "dashboard").iterdir() if (p / "__init__.py").exists() or p.suffix == ".py"]
    unnamed = [p.name for p in rooms if p.name != "__init__.py" and f"dashboard/{p.name}" not in text]
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"
    assert len(text.splitlines()) <= 60
    assert "farm totals trigger" in text and "0002_farm_totals_trigger" in text


def test_the_pool_total_tolerance_and_the_pool_list_parser_are_defined_once():
    # One rule for "these pools are this node's" (capacity.pools_match_total) and one reader of a pool
    # list (grid.rmb.parse.parse_pools): a second copy of either drifts from the first.
    tolerance = [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        if re.search(r"TOLERANCE_PERMILLE \*|\* 1000 [<>]=? \w*TOLERANCE", path.read_text())
    ]
    readers = [
        str(path.relative_to(ROOT))
        for path in sorted(PACKAGE.rglob("*.py"))
        if re.search(r"""\(\s*["']ssd["'],\s*["']hdd["']\s*\)""", path.read_text())
    ]
    assert tolerance == ["dashboard/capacity/placement.py"]
    assert readers == ["dashboard/grid/rmb/parse.py"], readers


def test_who_did_it_is_read_in_one_place():
    # One rule for the user a row names (audit_trail.actor_of): a copy of it read AnonymousUser as someone.
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "audit_trail.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\bby if getattr\(by, \"pk\"", line)
    ]
    assert found == []


def _lines_matching(pattern: str) -> list[str]:
    """`path:line` of every line of the product package matching `pattern` (migrations aside)."""
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(pattern, line)
    ]


def test_a_least_squares_line_is_drawn_in_one_place():
    # capacity.least_squares: the build's memory line, a node's calibration and the history's trend
    # were four copies of the same sums; a centred sum of squares anywhere else is a fifth.
    found = _lines_matching(r"- mean_\w+\) \*\* 2")
    assert [where.split(":")[0] for where in found] == ["dashboard/capacity/line.py"], found


def test_the_nodes_figures_are_summed_by_one_set_of_aggregates():
    # figures.selectors.farm_totals.AGGREGATES: the farms, the fleet page's filtered totals and the snapshots
    # count each figure through it; a second Sum of the catalog's slices drifts from the first.
    found = _lines_matching(r"""Sum\(\s*["']slices_free["']|Sum\(\s*["']phantom_slices["']""")
    assert {where.split(":")[0] for where in found} == {"dashboard/figures/selectors/farm_totals.py"}, found


def test_a_registration_is_checked_and_carved_in_one_place():
    # nodes.services.registration.registration_carve: one node and a page of an onboarding check, choose the
    # policy and carve through it.
    found = _lines_matching(r"\bcheck_registration\(|\bcheck_first_pool\(")
    calls = [where for where in found if not where.startswith("dashboard/nodes/services/registration_checks.py")]
    assert {where.split(":")[0] for where in calls} == {"dashboard/nodes/services/registration.py"}, calls
    assert len(calls) == 2, calls


def _node_answers_asked(source: str | Path) -> list[str]:
    """Where this source asks a node its pools or build (`.storage_pools(`, `.zos_version(`) of anything but
    the RMB door, which the product names `rmb` (`rmb = get_rmb()`) and which calls itself `self`."""
    found = []
    for node in _walked(source):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            door = isinstance(receiver, ast.Name) and receiver.id in {"rmb", "self"}
            if node.func.attr in {"storage_pools", "zos_version"} and not door:
                found.append(f"{node.lineno}: {ast.unparse(node.func)}()")
    return found


def test_the_scan_for_a_node_asked_in_process_finds_each_way():
    source = """
grid.storage_pools(7)
get_grid().zos_version(7); node.zos_version
rmb.storage_pools(target); rmb.version(target)
"""
    assert [line.split(": ")[0] for line in _node_answers_asked(source)] == ["2", "3"]


def test_the_product_asks_a_node_its_pools_and_build_through_the_rmb_door_only():
    # One door, one parser per fact (issue 46): the simulated grid answers over its RMB loopback
    # (settings.SIMULATED_RMB), through grid.rmb.parse, never as Python objects handed over in process.
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
        for where in _node_answers_asked(path)
    ]
    assert found == []


def _posts_guarded_by_hand(source: str | Path) -> list[str]:
    """Functions in this source decorated with require_POST themselves (not through views.action)."""
    return [
        f"{node.lineno}: {node.name}"
        for node in _walked(source)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(ast.unparse(d).split("(")[0].endswith("require_POST") for d in node.decorator_list)
    ]


def test_the_scan_for_a_post_guarded_by_hand_finds_each_way():
    source = """
@require_POST
def a(request): ...
@http.require_POST
def b(request): ...
@action("dashboard.x")
def c(request): ...
"""
    assert [line.split(": ")[1] for line in _posts_guarded_by_hand(source)] == ["a", "b"]


def test_every_button_is_guarded_by_the_one_action_decorator():
    # A login, POST only and the permission, in one order for every button (views.action): a view that
    # stacked them by hand could forget the permission, or check it before the method.
    found = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted((PACKAGE / "views").glob("*.py"))
        if path.name != "action.py"
        for where in _posts_guarded_by_hand(path)
    ]
    assert found == []
