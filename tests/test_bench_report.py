"""The bench's guard rails and its report: its own database only, loopback only, honest targets."""

import pytest

from bench.env import BenchSetupError, bench_env
from bench.report import END_MARKER, START_MARKER, benchmarks_write, targets


def test_it_refuses_a_database_without_bench_in_its_name(monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/slicedash")
    with pytest.raises(BenchSetupError, match="no 'bench' in its name"):
        bench_env(tmp_path)


def test_it_refuses_a_broker_off_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_BROKER_URL", "redis://redis.example.com:6379/6")
    with pytest.raises(BenchSetupError, match="only talks to loopback"):
        bench_env(tmp_path)


def test_it_uses_its_own_database_whatever_database_url_says(monkeypatch, tmp_path):
    monkeypatch.delenv("BENCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/slicedash")
    assert bench_env(tmp_path).database_name == "slicedash_bench"


def test_it_replaces_only_the_text_between_the_markers(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(f"# Bench\n\nwritten by hand\n\n{START_MARKER}\nold figures\n{END_MARKER}\n\nafter\n")
    benchmarks_write(path, f"{START_MARKER}\nnew figures\n{END_MARKER}")
    assert path.read_text() == f"# Bench\n\nwritten by hand\n\n{START_MARKER}\nnew figures\n{END_MARKER}\n\nafter\n"


def _figures(overview_ms_large: float, bulk_wall: float) -> dict:
    page = {"queries": 5, "median_ms": 0.0}
    return {
        "sizes": [100, 10000],
        "pages": {
            "100": {"overview": {**page, "median_ms": 40.0}},
            "10000": {
                "overview": {**page, "median_ms": overview_ms_large},
                "admin_changelist": {**page, "median_ms": 300.0},
                "naive_admin_changelist": {**page, "median_ms": 900.0},
            },
        },
        "bulk": {
            "1000": {"wall_s": 2.0, "nodes_per_s": 500, "worker_peak_rss_mib": 90.0, "worker_growth_mib": 2.0},
            "10000": {"wall_s": bulk_wall, "nodes_per_s": 400, "worker_peak_rss_mib": 91.0, "worker_growth_mib": 3.0},
        },
    }


def test_it_marks_the_targets_met_when_the_figures_meet_them():
    assert [t["met"] for t in targets(_figures(overview_ms_large=50.0, bulk_wall=25.0))] == [True] * 5


def test_it_marks_the_targets_missed_when_the_figures_miss_them():
    met = {t["target"]: t["met"] for t in targets(_figures(overview_ms_large=700.0, bulk_wall=31.0))}
    assert met == {
        "overview query count the same at every size": True,
        "overview time at 10,000 nodes ≤ 1.5× its time at 100": False,
        "overview ≥ 5× faster than the naive admin node list at 10,000 nodes": False,
        "bulk re-register of 10,000 nodes within 30 s": False,
        "worker peak memory not growing with the fleet": True,
    }


def test_it_judges_the_overview_against_the_naive_admin_and_shows_the_projects_admin_beside_it():
    # 100 ms: 9x the naive admin's 900 ms, 3x the project admin's 300 ms (which reads stored figures too).
    found = {t["target"]: t for t in targets(_figures(overview_ms_large=100.0, bulk_wall=25.0))}
    target = found["overview ≥ 5× faster than the naive admin node list at 10,000 nodes"]
    assert (target["met"], target["vs_naive_admin"], target["vs_admin"]) == (True, 9.0, 3.0)
