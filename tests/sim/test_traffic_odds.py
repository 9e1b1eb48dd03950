"""The month's odds under the build prior (issue 32): calibrated on a seeded month, and honest before a refusal."""

import pytest

from sim.month import simulate


@pytest.fixture(scope="module")
def month():
    return simulate(nodes=60, events=700, seed=7, policies=("zos-learning",), pools_reported=1.0).policies[
        "zos-learning"
    ]


def test_the_odds_are_calibrated_on_a_seeded_month(month):
    assert month.odds_calibration["outcomes"] > 300
    assert month.odds_calibration["ece"] <= 0.03


def test_the_prior_keeps_refusals_to_about_one_per_build(month):
    assert month.refused_by_cause.get("memory", 0) <= 4
