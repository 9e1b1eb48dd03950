"""/audit/: support reads what the last audit found; only admins start one or fix (POST, CSRF, permission, once)."""

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.capacity import GiB, SliceSize
from dashboard.catalogs.selectors.catalog_audit import Pace
from dashboard.catalogs.services.catalog_audit import catalog_audit_here
from dashboard.models import Job

pytestmark = pytest.mark.django_db
PAGE, RUN, FIX = reverse("audit"), reverse("audit-run"), reverse("audit-fix")


@pytest.fixture
def dry_run(sim_node):
    """A finished dry run that found one foreign VM on node 1774."""
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    sim_node.grid.deploy_vm(1774, SliceSize(cru=1, mru=2 * GiB, sru=50 * GiB), name="outside")
    return catalog_audit_here(fix=False, grid=sim_node.grid, pace=Pace(rate=1000.0, sleep=lambda _s: None))


def test_it_shows_support_the_findings_without_the_buttons(support_client, dry_run):
    content = support_client.get(PAGE).content.decode()

    assert (
        "is a VM the catalog does not know" in content,
        'id="audit-fix"' in content,
        'id="audit-run"' in content,
    ) == (
        True,
        False,
        False,
    )


def test_it_offers_admins_the_fix_of_the_dry_run(admins_client, dry_run):
    content = admins_client.get(PAGE).content.decode()

    assert f'name="dry_run_job" value="{dry_run.pk}"' in content


def test_it_says_when_no_audit_has_finished(support_client):
    assert b'id="audit-none"' in support_client.get(PAGE).content


def test_it_refuses_a_user_in_no_group(nogroup_client, dry_run):
    assert nogroup_client.get(PAGE).status_code == 403


def test_support_may_not_start_an_audit(support_client):
    assert support_client.post(RUN).status_code == 403


def test_support_may_not_fix(support_client, dry_run):
    assert support_client.post(FIX, {"dry_run_job": dry_run.pk}).status_code == 403


def test_starting_and_fixing_take_post_only(admins_client):
    assert (admins_client.get(RUN).status_code, admins_client.get(FIX).status_code) == (405, 405)


def test_a_post_without_the_csrf_token_is_refused(role_user, dry_run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admins", username="ada"))

    assert client.post(FIX, {"dry_run_job": dry_run.pk}).status_code == 403


def test_an_admin_starts_a_dry_run(admins_client):
    response = admins_client.post(RUN)

    job = Job.objects.get(kind=Job.Kind.CATALOG_AUDIT)
    assert (response.status_code, response["Location"], job.dry_run) == (302, reverse("job", args=[job.pk]), True)


def test_a_double_click_on_fix_starts_one_fix(admins_client, dry_run):
    admins_client.post(FIX, {"dry_run_job": dry_run.pk})
    admins_client.post(FIX, {"dry_run_job": dry_run.pk})

    fixes = Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT, dry_run=False)
    assert [job.parameters for job in fixes] == [{"dry_run_job": dry_run.pk}]


def test_a_dry_run_fixed_once_is_not_offered_again(admins_client, dry_run):
    admins_client.post(FIX, {"dry_run_job": dry_run.pk})

    assert b'id="audit-fix"' not in admins_client.get(PAGE).content


def test_a_fix_that_names_no_dry_run_starts_nothing(admins_client):
    admins_client.post(FIX, {"dry_run_job": "x"})

    assert not Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT).exists()
