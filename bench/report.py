"""Machine facts, the targets (met or missed), and the results table in BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

START_MARKER = "<!-- bench:results:start (written by bench/run.py; edits between the markers are lost) -->"
END_MARKER = "<!-- bench:results:end -->"
MEMORY_GROWTH_ALLOWED = 1.10  # peak RSS at the largest fleet vs the smallest, for "not growing"


def machine_facts(broker_url: str) -> dict:
    import celery
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    try:
        import redis

        redis_version = redis.Redis.from_url(broker_url).info("server").get("redis_version", "?")
    except Exception as exc:  # the figure is informative only
        redis_version = f"unknown ({type(exc).__name__})"
    meminfo = Path("/proc/meminfo").read_text()
    ram_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.+)", cpuinfo)
    return {
        "nproc": os.cpu_count(),
        "cpu": model.group(1).strip() if model else platform.processor(),
        "ram_gib": round(ram_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": postgres,
        "redis": redis_version,
        "django": django.get_version(),
        "celery": celery.__version__,
    }


# (page, the page it is measured against, the most it may take as a multiple of it at 10,000 nodes)
PAGE_RATIOS = (
    ("fleet_map", "the fleet map `/map/`", 2.0),
    ("placement", "the placement answer `/placement/`", 1.5),
)


def page_ratio_targets(pages: dict, large: str) -> list[dict]:
    """The map and the placement page against the fleet table's time at the largest size (judged at 10,000)."""
    found = []
    if large not in pages:
        return found
    overview_ms = pages[large]["overview"]["median_ms"]
    for key, name, most in PAGE_RATIOS:
        if key not in pages[large]:
            continue
        ms = pages[large][key]["median_ms"]
        ratio = ms / overview_ms if overview_ms else float("inf")
        found.append(
            {
                "target": f"{name} ≤ {most:g}× the fleet table's time at {int(large):,} nodes",
                "figure": f"{ms} ms vs {overview_ms} ms: {ratio:.2f}× ({pages[large][key]['queries']} q)",
                "met": ratio <= most if large == "10000" else None,
                "ratio": round(ratio, 2),
            }
        )
    return found


def targets(figures: dict) -> list[dict]:
    """Each target with its figure and met (True/False, or None when this run did not measure it)."""
    sizes = figures.get("sizes", [])
    pages = figures.get("pages", {})
    small, large = (str(min(sizes)), str(max(sizes))) if sizes else ("", "")
    # The order is the table's in BENCHMARKS.md: the pages, the API, precheck, then the jobs.
    found = _overview_targets(pages, sizes, small=small, large=large)
    found += page_ratio_targets(pages, large)
    found += _fleet_map_size_targets(pages, large)
    found += _policy_edit_targets(pages, large)
    found += _api_targets(figures.get("api", {}), sizes, small=small, large=large)
    found += _api_precheck_targets(figures.get("precheck", {}).get("api"))
    found += _bulk_targets(figures.get("bulk", {}))
    found += _job_targets(figures)
    return found


def _overview_targets(pages: dict, sizes: list[int], *, small: str, large: str) -> list[dict]:
    """The overview's flat query count, its time at the largest size vs the smallest, and vs the admin."""
    found = []
    queries = {size: pages[str(size)]["overview"]["queries"] for size in sizes if str(size) in pages}
    found.append(
        {
            "target": "overview query count the same at every size",
            "figure": ", ".join(f"{q} at {s:,}" for s, q in queries.items()),
            "met": len(set(queries.values())) == 1 if len(queries) > 1 else None,
        }
    )

    if small in pages and large in pages and small != large:
        ratio = pages[large]["overview"]["median_ms"] / pages[small]["overview"]["median_ms"]
        found.append(
            {
                "target": f"overview time at {int(large):,} nodes ≤ 1.5× its time at {int(small):,}",
                "figure": f"{pages[large]['overview']['median_ms']} ms vs {pages[small]['overview']['median_ms']} ms: {ratio:.1f}×",
                "met": ratio <= 1.5 if (small, large) == ("100", "10000") else None,
                "ratio": round(ratio, 2),
            }
        )

    if large in pages and "admin_changelist" in pages[large]:
        found.append(_overview_vs_admin_target(pages[large], large))
    return found


def _overview_vs_admin_target(page: dict, large: str) -> dict:
    overview_ms = page["overview"]["median_ms"]
    admin_ms = page["admin_changelist"]["median_ms"]
    naive_ms = page["naive_admin_changelist"]["median_ms"]
    # The baseline is the naive one the issue names: a Django admin list computing the same
    # columns row by row. The project's own admin reads the figures stored on each node as
    # the overview does, so it is shown beside it, not used as the baseline.
    return {
        "target": f"overview ≥ 5× faster than the naive admin node list at {int(large):,} nodes",
        "figure": (
            f"overview {overview_ms} ms; naive admin {naive_ms} ms ({naive_ms / overview_ms:.2f}×); "
            f"the project's admin, on the stored figures too, {admin_ms} ms ({admin_ms / overview_ms:.2f}×)"
        ),
        "met": naive_ms / overview_ms >= 5 if large == "10000" else None,
        "vs_admin": round(admin_ms / overview_ms, 2),
        "vs_naive_admin": round(naive_ms / overview_ms, 2),
    }


def _fleet_map_size_targets(pages: dict, large: str) -> list[dict]:
    """The map's weight and time at the largest size (issue 37), with a farm's cells opened on demand."""
    if not (large in pages and "bytes" in pages[large].get("fleet_map", {})):
        return []
    m = pages[large]["fleet_map"]
    farm = pages[large].get("fleet_map_farm")
    opened = f"; a farm's cells on demand {farm['median_ms']} ms, {farm['bytes'] / 1024:,.1f} KiB" if farm else ""
    return [
        {
            "target": f"the fleet map at {int(large):,} nodes ≤ 300 KB and ≤ 50 ms (issue 37)",
            "figure": f"{m['bytes'] / 1024:,.1f} KiB, {m['median_ms']} ms, {m['queries']} q{opened}",
            "met": (m["bytes"] <= 300 * 1024 and m["median_ms"] <= 50) if large == "10000" else None,
        }
    ]


def _policy_edit_targets(pages: dict, large: str) -> list[dict]:
    """A fleet-default edit within a second in the request; the job's rewrite after it is shown, not judged."""
    if not (large in pages and "policy_edit" in pages[large]):
        return []
    edit = pages[large]["policy_edit"]
    rewrite = (
        f", then the job rewrites every node's figures in {edit['rewrite_ms']} ms" if edit.get("rewrite_ms") else ""
    )
    return [
        {
            "target": f"a fleet-default edit at {int(large):,} nodes ≤ 1 s in the request (issue 37)",
            "figure": f"{edit['median_ms']} ms in the request{rewrite}",
            "met": edit["median_ms"] <= 1000 if large == "10000" else None,
        }
    ]


def _api_targets(api: dict, sizes: list[int], *, small: str, large: str) -> list[dict]:
    found = []
    for key, name in API_CALLS:
        series = {size: api[str(size)][key] for size in sizes if str(size) in api and key in api[str(size)]}
        scale = _scale_targets(name, series, small=small, large=large)
        found += scale[:1] if key in GROWING_ANSWERS else scale
    return found


def _api_precheck_targets(api_precheck: dict | None) -> list[dict]:
    """The API's precheck rate: a figure only, as no threshold was set for it."""
    if not api_precheck:
        return []
    return [
        {
            "target": "precheck calls per second through the API with a real token (a figure; no threshold set)",
            "figure": (
                f"{api_precheck['calls_per_s']:,} calls/s, one client in sequence (median {api_precheck['median_ms']} ms, "
                f"p99 {api_precheck['p99_ms']} ms, {api_precheck['queries']} q) at {api_precheck['fleet']:,} nodes"
            ),
            "met": "figure",
        }
    ]


def _bulk_targets(bulk: dict) -> list[dict]:
    """The bulk re-register's wall time at 10,000 nodes, and the worker's memory across the sizes."""
    found = []
    if "10000" in bulk:
        wall = bulk["10000"]["wall_s"]
        found.append(
            {
                "target": "bulk re-register of 10,000 nodes within 30 s",
                "figure": f"{wall} s ({bulk['10000']['nodes_per_s']} nodes/s)",
                "met": wall <= 30,
            }
        )

    if len(bulk) > 1:
        low, high = min(bulk, key=int), max(bulk, key=int)
        peak_low, peak_high = bulk[low]["worker_peak_rss_mib"], bulk[high]["worker_peak_rss_mib"]
        found.append(
            {
                "target": "worker peak memory not growing with the fleet",
                "figure": (
                    f"peak RSS {peak_low} MiB at {int(low):,} nodes, {peak_high} MiB at {int(high):,} "
                    f"(growth during the job {bulk[low]['worker_growth_mib']} / {bulk[high]['worker_growth_mib']} MiB)"
                ),
                "met": peak_high <= peak_low * MEMORY_GROWTH_ALLOWED,
            }
        )
    return found


def _job_targets(figures: dict) -> list[dict]:
    """The jobs against a slow grid (onboarding, its command line, the fleet watch, paged bulk): each judged
    by its own measurement, which carries its target and met."""
    found = []
    for key, target in (
        ("onboard", _onboarding_target),
        ("onboard_cli", _onboarding_cli_target),
        ("watch", _watch_target),
        ("bulk_pages", _bulk_pages_target),
    ):
        measured = figures.get(key)
        if measured:
            found.append(target(measured))
    return found


def _onboarding_target(onboarding: dict) -> dict:
    return {
        "target": f"onboarding {onboarding['farms']} farms ({onboarding['nodes']:,} nodes, {onboarding['latency_ms']} ms a request) ≤ {onboarding['target_s']} s with one worker (3 × its floor of {onboarding.get('floor_s', '?')} s)",
        "figure": (
            f"{onboarding['wall_s']} s; one by one it would take {onboarding['one_by_one_s']} s "
            f"({onboarding['single_read_ms']} ms a node); worker peak {onboarding['worker_memory_mib']['peak_rss_mib']} MiB"
        ),
        "met": onboarding["met"],
    }


def _onboarding_cli_target(cli: dict) -> dict:
    return {
        "target": (
            f"onboarding {cli['nodes']:,} nodes from the command line (--policy legacy) "
            f"{cli.get('target', '≤ 2x its floor')} (issue 43)"
        ),
        "figure": (
            f"{cli['wall_s']} s against a floor of {cli.get('floor_s', '?')} s: {cli.get('vs_floor', '?')}× "
            f"({cli['startup_s']} s of it the process's start-up; {cli.get('cpu_s', '?')} s of CPU, "
            f"{cli.get('db_cpu_s', '?')} s of its database backend's; at most "
            f"{cli.get('most_requests_in_a_second', '?')} requests in a second; load average "
            f"{cli.get('load_average', '?')}); the worker's run {cli['worker_wall_s']} s, {cli['vs_worker']}×"
        ),
        "met": cli["met"],
    }


def _watch_target(watch: dict) -> dict:
    return {
        "target": f"fleet watch of {watch['nodes']:,} nodes ({watch['latency_ms']} ms a request, pages of {watch['page_size']}) ≤ {watch['target_s']:g} s with one worker (2 × its floor of {watch['floor_s']:g} s)",
        "figure": (
            f"{', '.join(str(r['wall_s']) for r in watch['runs'])} s; {watch['cpu_ms_per_node']} ms of CPU a node; "
            f"worker peak {watch['worker_memory_mib']['peak_rss_mib']} MiB"
        ),
        "met": watch["met"],
    }


def _bulk_pages_target(paged: dict) -> dict:
    return {
        "target": f"bulk re-register of {paged['stale_before']:,} stale nodes ({paged['latency_ms']} ms a request, read in pages) ≤ {paged['target_s']} s with one worker",
        "figure": (
            f"{paged['wall_s']} s, {paged['requests']} requests ({paged['pages']} pages, {paged['read_alone']} nodes alone); "
            f"one by one it would take {paged['one_by_one_s']} s; worker peak {paged['worker_memory_mib']['peak_rss_mib']} MiB"
        ),
        "met": paged["met"],
    }


# (key in figures["api"][size], how the targets name it)
API_CALLS = (
    ("nodes_page", "API `GET /api/v1/nodes` (page of 100)"),
    ("metrics", "`/metrics` scrape"),
    # Its answer is 12 series a farm, so only its query count can be flat; its time is shown per farm.
    ("metrics_farms", "`/metrics/farms` scrape"),
)
# Calls whose answer grows with the fleet by design: the query-count target only.
GROWING_ANSWERS = ("metrics_farms",)


def _scale_targets(name: str, series: dict[int, dict], *, small: str, large: str) -> list[dict]:
    """The two targets of a call timed at every size: the same query count, and ≤ 1.5× at 10,000 vs 100."""
    if not series:
        return []
    found = [
        {
            "target": f"{name} query count the same at every size",
            "figure": ", ".join(f"{f['queries']} at {s:,}" for s, f in series.items()),
            "met": len({f["queries"] for f in series.values()}) == 1 if len(series) > 1 else None,
        }
    ]
    if int(small) in series and int(large) in series and small != large:
        low, high = series[int(small)]["median_ms"], series[int(large)]["median_ms"]
        found.append(
            {
                "target": f"{name} time at {int(large):,} nodes ≤ 1.5× its time at {int(small):,}",
                "figure": f"{high} ms vs {low} ms: {high / low:.1f}×",
                "met": high / low <= 1.5 if (small, large) == ("100", "10000") else None,
                "ratio": round(high / low, 2),
            }
        )
    return found


def _policy_edit_cell(edit: dict) -> str:
    if edit.get("rewrite_ms") is None:
        return f"{edit['median_ms']} ms (figures rewritten in it) |"
    return f"{edit['median_ms']} ms, then the job {edit['rewrite_ms']} ms |"


def _mark(met) -> str:
    return {True: "met", False: "**missed**", None: "n/a (not measured at the target's sizes)", "figure": "measured"}[
        met
    ]


def results_markdown(figures: dict) -> str:
    """The block between the markers in BENCHMARKS.md: the run, the targets, then a table per path."""
    lines = [START_MARKER, ""]
    lines += _run_facts_lines(figures)
    lines += _targets_table_lines(figures["targets"])
    lines += _pages_table_lines(figures)
    if figures.get("api"):
        lines += _api_table_lines(figures)
    if figures.get("bulk"):
        lines += _bulk_table_lines(figures)
    lines += _precheck_lines(figures.get("precheck", {}), figures.get("click_to_result", {}))
    lines += [
        "",
        "<details><summary>The run's JSON</summary>",
        "",
        "```json",
        figures["json"],
        "```",
        "",
        "</details>",
        "",
        END_MARKER,
    ]
    return "\n".join(lines)


def _run_facts_lines(figures: dict) -> list[str]:
    """When and how the run ran: the load around it, the code measured, the machine."""
    m = figures["machine"]
    load = figures["load"]
    return [
        f"Run of {figures['finished_at']} (`{figures['command']}`, {figures['duration_s']:.0f} s), "
        f"load average {load['before']} before the run "
        + (f"(waited for < {load['threshold']}), " if load["threshold"] else "(no load wait), ")
        + f"{load['after']} after; during the phases "
        + f"{min(load.get('during') or [0])} to {max(load.get('during') or [0])} "
        + "(the bench's own worker and PostgreSQL included).",
        "",
        f"Code: commit {figures['code']['commit']}"
        + (
            f" plus uncommitted changes to {', '.join(figures['code']['uncommitted'])}."
            if figures["code"]["uncommitted"]
            else "."
        ),
        "",
        f"Machine: {m['nproc']} CPU ({m['cpu']}), {m['ram_gib']} GiB RAM, Linux {m['kernel']}; "
        f"Python {m['python']}, PostgreSQL {m['postgresql']}, Redis {m['redis']}, Django {m['django']}, "
        f"Celery {m['celery']}.",
        "",
    ]


def _targets_table_lines(found: list[dict]) -> list[str]:
    lines = [
        "### Targets",
        "",
        "| Target | Figure | Result |",
        "|---|---|---|",
    ]
    lines += [f"| {t['target']} | {t['figure']} | {_mark(t['met'])} |" for t in found]
    return lines


def _pages_table_lines(figures: dict) -> list[str]:
    lines = [
        "",
        "### Pages (server time, median; queries per request)",
        "",
        "| Nodes | Overview `/` | Node page | Fleet map `/map/` (its first read after a write to every node: not a target) | Placement `/placement/` | Admin node list | Naive admin node list | Fleet-default edit: in the request (every node's figures rewritten by a job after it, over 500 nodes) |",
        "|---:|---|---|---|---|---|---|---:|",
    ]
    for size in figures["sizes"]:
        p = figures["pages"].get(str(size))
        if not p:
            continue
        lines.append(
            f"| {size:,} | {_page_cell(p, 'overview')} | {_page_cell(p, 'node_page')} | {_map_cell(p)} | "
            f"{_page_cell(p, 'placement')} | "
            f"{_page_cell(p, 'admin_changelist')} | "
            f"{_page_cell(p, 'naive_admin_changelist')} | "
            + (_policy_edit_cell(p["policy_edit"]) if "policy_edit" in p else "— |")
        )
    return lines


def _page_cell(p: dict, key: str) -> str:
    """A page's median and query count at one size, or a dash when this run did not measure it."""
    if key not in p:
        return "—"
    return f"{p[key]['median_ms']} ms, {p[key]['queries']} q"


def _map_cell(p: dict) -> str:
    """The map's warm read, its weight, and its first read after every node changed when measured."""
    size = f", {p['fleet_map']['bytes'] / 1024:,.0f} KiB" if "bytes" in p.get("fleet_map", {}) else ""
    if "fleet_map_cold" not in p:
        return _page_cell(p, "fleet_map") + size
    return f"{_page_cell(p, 'fleet_map')}{size} (first read {_page_cell(p, 'fleet_map_cold')})"


def _api_table_lines(figures: dict) -> list[str]:
    lines = [
        "",
        "### API and /metrics (server time, median; queries per request), with bearer tokens",
        "",
        "| Nodes | `GET /api/v1/nodes?per_page=100` (read token) | `/metrics` scrape (METRICS_TOKEN) | `/metrics/farms` scrape |",
        "|---:|---|---|---|",
    ]
    for size in figures["sizes"]:
        a = figures["api"].get(str(size))
        if not a:
            continue
        n, m = a["nodes_page"], a["metrics"]
        lines.append(
            f"| {size:,} | {n['median_ms']} ms, {n['queries']} q, {n['rows']} rows, {n['bytes'] / 1024:,.0f} KiB | "
            f"{m['median_ms']} ms, {m['queries']} q, {m['samples']:,} samples, {m['bytes'] / 1024:,.0f} KiB | "
            f"{_metrics_farms_cell(a.get('metrics_farms'))} |"
        )
    return lines


def _metrics_farms_cell(f: dict | None) -> str:
    """The per-farm scrape grows with the farms by design, so its time is shown per farm too."""
    if not f:
        return "—"
    return (
        f"{f['median_ms']} ms, {f['queries']} q, {f['farms']:,} farms ({f['median_ms'] * 1000 / max(f['farms'], 1):,.0f} µs a farm), "
        f"{f['bytes'] / 1024:,.0f} KiB"
    )


def _bulk_table_lines(figures: dict) -> list[str]:
    lines = [
        "",
        "### Bulk re-register of every node (all stale), real worker on Redis",
        "",
        "| Nodes | Wall | Nodes/s | In the worker | Slices removed / added | Raw SQL floor | Worker RSS before → peak | Its job page |",
        "|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for size, b in sorted(figures["bulk"].items(), key=lambda item: int(item[0])):
        floor = figures.get("floor", {}).get(size, {})
        lines.append(
            f"| {int(size):,} | {b['wall_s']} s | {b['nodes_per_s']} | {b['worker_s']} s | "
            f"{b['slices_removed']:,} / {b['slices_added']:,} | {floor.get('sql_s', '—')} s | "
            f"{b['worker_rss_before_mib']} → {b['worker_peak_rss_mib']} MiB | "
            + (
                f"{b['job_page']['median_ms']} ms, {b['job_page']['bytes'] / 1024:,.0f} KiB |"
                if "job_page" in b
                else "— |"
            )
        )
    return lines


def _precheck_lines(pre: dict, click: dict) -> list[str]:
    """One bullet per way precheck was measured, then the click to result, each when this run measured it."""
    lines = ["", "### Precheck and click to result", ""]
    if "pure" in pre:
        lines.append(
            f"- Pure `capacity.precheck`: {pre['pure']['checks_per_s']:,} checks/s "
            f"({pre['pure']['slices_per_check']} free slices each, {pre['pure']['verdicts_per_s']:,} verdicts/s)."
        )
    if "end_to_end" in pre:
        e = pre["end_to_end"]
        lines.append(
            f"- End to end (`precheck_run` through `GridProxyClient` → simulator over HTTP on loopback, "
            f"Nagle's algorithm forced back on as the server had it before TCP_NODELAY, "
            f"{e['requests']} requests): median {e['median_ms']} ms, p99 {e['p99_ms']} ms "
            f"(the HTTP read alone: median {e['http_read_median_ms']} ms, p99 {e['http_read_p99_ms']} ms)."
        )
    if "end_to_end_nodelay" in pre:
        e = pre["end_to_end_nodelay"]
        lines.append(
            f"- The same as served now (`sim/grid/http.py` sets TCP_NODELAY): "
            f"median {e['median_ms']} ms, p99 {e['p99_ms']} ms (HTTP read: median {e['http_read_median_ms']} ms, "
            f"p99 {e['http_read_p99_ms']} ms)."
        )
    if "api" in pre:
        a = pre["api"]
        lines.append(
            f"- Through the API (`POST /api/v1/nodes/{{id}}/precheck`, a token with the precheck scope, "
            f"`django.test.Client` in the bench process, the live read from the simulated grid's SQLite file, "
            f"{a['requests']} calls in sequence over {a['nodes']} up nodes at {a['fleet']:,} nodes): "
            f"**{a['calls_per_s']:,} calls/s**, median {a['median_ms']} ms, p99 {a['p99_ms']} ms, {a['queries']} queries a call."
        )
    if click:
        lines.append(
            f"- Click to result ({click['clicks']} re-registers at {click['nodes']:,} nodes): median "
            f"{click['median_ms']} ms (max {click['max_ms']} ms) = POST {click['post_median_ms']} ms + queue "
            f"{click['queue_median_ms']} ms + job {click['run_median_ms']} ms + job page {click['page_median_ms']} ms. "
            "In a browser the job card polls every second, so a person sees it up to 1 s later."
        )
    return lines


def benchmarks_write(path: Path, block: str) -> None:
    """Replace the text between the markers (or append the block when the file has none)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start != -1 and end != -1 and end > start:
        text = text[:start] + block + text[end + len(END_MARKER) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
