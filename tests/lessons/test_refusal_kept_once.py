"""Migration 0005: the CapacitySample copy of a refusal that taught something is folded into its Observation,
and calibration reads the same reading, once, before and after (and after going back)."""

from datetime import timedelta
from importlib import import_module

import pytest
from django.apps import apps
from django.utils import timezone

from dashboard.capacity import GiB, MiB
from dashboard.models import CapacitySample, Observation
from dashboard.policies.services.calibration import readings_by_node
from tests.factories import sim_node_1774

MIGRATION = import_module("dashboard.migrations.0005_refusal_kept_once")
VMS = 3
ACCOUNTED = 14 * GiB  # what the proxy counted: the VMs and ZOS's reserve (10% of the 31 GiB node)
USABLE = 12 * GiB
USED_SRU = 300 * GiB


def _sample(node, *, at, vm_count, used_mru) -> CapacitySample:
    sample = CapacitySample.objects.create(
        node=node,
        source="refusal",
        vm_count=vm_count,
        vm_mru=ACCOUNTED - 31 * GiB // 10,
        vm_sru=USED_SRU - 20 * GiB,
        total_mru=node.total_mru,
        total_sru=node.total_sru,
        used_mru=used_mru,
        used_sru=USED_SRU,
    )
    CapacitySample.objects.filter(pk=sample.pk).update(at=at)
    return sample


@pytest.fixture
def copied(sim_node, db):
    """Node 1774 as a database before 0005 holds it: a refusal that taught (its observation and its copy)
    and one that taught nothing (its sample alone), an hour apart."""
    node = sim_node_1774(sim_node)
    taught_at = timezone.now() - timedelta(hours=2)
    observation = Observation.objects.create(
        node=node,
        kind=Observation.Kind.MEMORY,
        seen_at=taught_at,
        raw_error="cannot fulfil required memory size 4294967296 bytes out of usable 12884901888 bytes",
        vm_count=VMS,
        total_mru=node.total_mru,
        accounted_mru=ACCOUNTED,
        usable_mru=USABLE,
        hidden_mru_per_vm=(node.total_mru - USABLE - ACCOUNTED) // VMS,
        standing=Observation.Standing.GROUP,
    )
    copy = _sample(node, at=taught_at, vm_count=VMS, used_mru=node.total_mru - USABLE)
    alone = _sample(node, at=taught_at + timedelta(hours=1), vm_count=VMS + 1, used_mru=ACCOUNTED + 512 * MiB)
    return node, observation, copy, alone


def test_the_copy_is_folded_into_its_observation_and_the_lone_sample_stays(copied):
    node, observation, copy, alone = copied

    MIGRATION.copies_folded(apps, None)

    observation.refresh_from_db()
    assert observation.used_sru == USED_SRU
    assert list(CapacitySample.objects.filter(source="refusal").values_list("pk", flat=True)) == [alone.pk]
    readings = readings_by_node(node)[node.pk]
    # The taught refusal once (not twice, as the copy and its observation), then the lone sample.
    taught = (VMS, ACCOUNTED - 31 * GiB // 10, node.total_mru - USABLE, USED_SRU - 20 * GiB, USED_SRU)
    assert readings.memory == [taught, (VMS + 1, alone.vm_mru, alone.used_mru, alone.vm_sru, alone.used_sru)]
    assert readings.all == readings.memory


def test_going_back_writes_the_copy_again(copied):
    node, observation, copy, _alone = copied
    before = CapacitySample.objects.filter(pk=copy.pk).values_list(
        "vm_count", "vm_mru", "used_mru", "vm_sru", "used_sru", "total_mru", "total_sru", "at"
    )
    before = list(before)

    MIGRATION.copies_folded(apps, None)
    MIGRATION.copies_written(apps, None)

    observation.refresh_from_db()
    assert observation.used_sru is None
    again = CapacitySample.objects.filter(source="refusal", at=observation.seen_at).values_list(
        "vm_count", "vm_mru", "used_mru", "vm_sru", "used_sru", "total_mru", "total_sru", "at"
    )
    assert list(again) == before
