"""access.services.audit_trail: the one writer of the audit trail."""

import pytest
from django.contrib.auth.models import AnonymousUser

from dashboard.access.services.audit_trail import AuditEntry, audit_record, audit_records
from dashboard.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_it_stores_the_row_as_given(role_user):
    admin = role_user("admins")
    row = audit_record(action="node withheld", message="node 7 withheld", source="web", actor=admin, detail={"a": 1})
    stored = AuditEvent.objects.get(pk=row.pk)
    assert (stored.action, stored.message, stored.source, stored.actor, stored.detail) == (
        "node withheld",
        "node 7 withheld",
        "web",
        admin,
        {"a": 1},
    )


def test_it_stores_an_anonymous_actor_as_none():
    row = audit_record(action="hold.made", message="held", source="api", actor=AnonymousUser())
    assert AuditEvent.objects.get(pk=row.pk).actor is None


def test_it_refuses_an_unsaved_user_as_actor(django_user_model):
    with pytest.raises(ValueError):
        audit_record(action="x", message="x", source="web", actor=django_user_model(username="ghost"))


def test_it_stores_no_detail_as_an_empty_one():
    row = audit_record(action="alert.firing", message="firing", source="beat")
    assert AuditEvent.objects.get(pk=row.pk).detail == {}


def test_it_refuses_a_related_row_named_twice(role_user):
    admin = role_user("admins")
    with pytest.raises(ValueError, match="actor twice"):
        audit_record(action="x", message="x", source="web", actor=admin, actor_id=admin.pk)


def test_it_stores_many_rows_in_one_statement(role_user, django_assert_num_queries):
    admin = role_user("admins")
    entries = [
        AuditEntry(action="slice.deleted", message=f"slice {i}", source="admin", actor_id=admin.pk) for i in (1, 2)
    ]
    with django_assert_num_queries(1):
        audit_records(entries)
    assert list(AuditEvent.objects.order_by("pk").values_list("message", "actor")) == [
        ("slice 1", admin.pk),
        ("slice 2", admin.pk),
    ]


def test_it_writes_nothing_for_no_rows(django_assert_num_queries):
    with django_assert_num_queries(0):
        audit_records([])
    assert not AuditEvent.objects.exists()
