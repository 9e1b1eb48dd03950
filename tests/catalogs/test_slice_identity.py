"""A slice's number is its identity: a re-carve retires slices, never renumbers or reuses them, so a
failure row names the slice it was about forever (shown as retired once the slice is gone)."""

import pytest
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.catalogs.services.slices import SliceNumberUsed, node_slices_write
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Deployment, Job, Node, Slice

pytestmark = pytest.mark.django_db


def reregister(node: Node) -> None:
    job_execute(job=job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=node).job.pk))


def test_a_recarve_numbers_new_slices_after_every_number_used(legacy_node_1774):
    before = set(legacy_node_1774.slices.values_list("index", flat=True))  # 0..6, slice 0 deployed
    reregister(legacy_node_1774)
    after = set(Slice.objects.filter(node=legacy_node_1774).values_list("index", flat=True))
    assert 0 in after and not (after - {0}) & before  # the re-carved ones got new numbers
    assert Node.objects.get(pk=legacy_node_1774.pk).slice_index_next == max(after) + 1


def test_a_failure_row_keeps_naming_its_slice_shown_as_retired(legacy_node_1774, support_client):
    failed = legacy_node_1774.slices.get(index=6)
    row = Deployment.objects.create(
        node=legacy_node_1774,
        slice=failed,
        slice_index=6,
        cru=1,
        mru=failed.mru,
        sru=failed.sru,
        state=Deployment.State.FAILED,
        cause=Deployment.Cause.MEMORY,
        raw_error="out of memory",
    )
    reregister(legacy_node_1774)
    row.refresh_from_db()
    assert row.slice_id is None and row.slice_index == 6
    assert not Slice.objects.filter(node=legacy_node_1774, index=6).exists()  # no new slice took number 6
    reregister(legacy_node_1774)  # and not after a second re-carve either
    assert not Slice.objects.filter(node=legacy_node_1774, index=6).exists()
    page = support_client.get(reverse("deployments-failed")).content.decode()
    assert "#6" in page and "retired" in page


def test_a_slice_added_by_hand_cannot_take_a_number_used_before(legacy_node_1774):
    reregister(legacy_node_1774)
    node = Node.objects.get(pk=legacy_node_1774.pk)
    with pytest.raises(SliceNumberUsed, match="never reused"):
        node_slices_write(node=node, added=[Slice(index=3, cru=1, mru=4 * GiB, sru=100 * GiB)])
    node_slices_write(node=node, added=[Slice(index=node.slice_index_next, cru=1, mru=4 * GiB, sru=100 * GiB)])
    assert Node.objects.get(pk=node.pk).slice_index_next == node.slice_index_next
