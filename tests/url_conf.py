"""Every view in the URL conf, read from config.urls at import (collection) time, and a URL for each.

Shared by tests/reliability/test_reliability_security.py and test_views_permissions.py, so a new page is covered
by both (or they ask for a sample value of its URL argument in conftest's `world`) without anyone
remembering to add it.
"""

from django.urls import URLPattern, URLResolver, get_resolver, reverse

# Pages anyone may see: the login form, logout (a POST that only ends a session), and /favicon.ico
# (a redirect to a static file, which the login page needs as much as any other).
PUBLIC = {"login", "logout", "favicon"}
# Doors for programs, which know no session: the JSON API (its root here; every operation is tried
# in tests/api/test_api_auth.py) and /metrics. They never redirect to the login page: they answer 401
# without their bearer token, 404 where nothing is (the API's root; /metrics without METRICS_TOKEN),
# 405 for a wrong method. CSRF does not guard them, the missing session does.
TOKEN_DOORS = {"ninja:root", "metrics", "metrics-farms"}
HTMX = {"HTTP_HX_REQUEST": "true"}


def _views() -> list[tuple[str, str]]:
    """(name, route) of every view; an included URL conf (the admin) by its root."""
    found = []
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLPattern):
            found.append((entry.name, str(entry.pattern)))
        elif isinstance(entry, URLResolver):
            found.append((f"{entry.app_name or entry.namespace}:root", str(entry.pattern)))
    return found


def _arguments(name: str) -> list[str]:
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLPattern) and entry.name == name:
            return list(getattr(entry.pattern, "converters", {}))
    return []


VIEWS = _views()
ACTIONS = [(name, route) for name, route in VIEWS if name not in PUBLIC]


def url_of(name: str, route: str, world: dict) -> str:
    if name.endswith(":root"):
        return "/" + route
    kwargs = {}
    for argument in _arguments(name):
        assert argument in world, f"add a sample value for the URL argument {argument!r} of {name!r} to world()"
        kwargs[argument] = world[argument]
    return reverse(name, kwargs=kwargs)


def url_world(node) -> dict:
    """One of each other thing a URL can name, beside `node`: a job, a policy, a token, an alert, a
    lesson, a reading waiting for its second source; their ids by URL argument (conftest's `world`)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from dashboard import capacity
    from dashboard.capacity import GiB
    from dashboard.models import Alert, ApiToken, Job, MemoryLesson, Observation, Policy

    job = Job.objects.create(kind=Job.Kind.PRECHECK, node=node, state=Job.State.SUCCEEDED, result={"words": "ok"})
    policy = Policy.objects.create(
        name="fleet-default", scope=Policy.Scope.FLEET, **Policy.parameters_from(capacity.PROFILES["zos"])
    )
    holder = get_user_model().objects.create_user(username="token-holder")
    token = ApiToken.objects.create(user=holder, name="t", prefix="sdk_world", key_hash="0" * 64, scopes=["read"])
    alert = Alert.objects.create(
        rule="phantom-slices",
        subject="farm 4242",
        since=timezone.now(),
        summary="Farm 4242 offers 1 phantom slice",
        evaluated_at=timezone.now(),
    )
    lesson = MemoryLesson.objects.create(build="", per_vm_mru=GiB, points=1, nodes=1, learnt_at=timezone.now())
    waiting = Observation.objects.create(
        node=node,
        kind=Observation.Kind.MEMORY,
        seen_at=timezone.now(),
        source="reported",
        raw_error="cannot fulfil required memory size 1 bytes out of usable 0 bytes",
        vm_count=1,
        total_mru=node.total_mru,
        accounted_mru=node.total_mru,
        usable_mru=0,
        standing=Observation.Standing.NODE,
    )
    return {
        "node_id": node.grid_id,
        "job_id": job.pk,
        "policy_id": policy.pk,
        "token_id": token.pk,
        "alert_id": alert.pk,
        "farm_id": node.farm_id,
        "lesson_id": lesson.pk,
        "observation_pk": waiting.pk,
    }
