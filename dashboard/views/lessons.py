"""Memory readings waiting for a second source, and those held aside: an admin applies or drops one."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.lessons.selectors.lessons import lessons_waiting
from dashboard.lessons.services.lesson_review import LessonReviewError, observation_apply, observation_drop
from dashboard.models import Observation
from dashboard.views.action import action

# Deciding what the fleet believes is an admin's act, as reverting a lesson is (views.node).
REVIEW = "dashboard.reregister_node"


@login_required
@require_GET
@permission_required(REVIEW, raise_exception=True)
@vary_on_headers("HX-Request")
def waiting(request):
    context = {"section": "failed", **lessons_waiting(now=timezone.now())}
    template = "dashboard/lessons_waiting.html#readings" if request.htmx else "dashboard/lessons_waiting.html"
    return render(request, template, context)


def _review(request, observation_pk: int, act, done: str):
    observation = get_object_or_404(Observation, pk=observation_pk)
    try:
        act(observation=observation, by=request.user, source="web")
    except LessonReviewError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Observation {observation.pk} of node {observation.node.grid_id} {done}.")
    if request.htmx:
        context = {"section": "failed", **lessons_waiting(now=timezone.now())}
        return render(request, "dashboard/lessons_waiting.html#readings", context)
    return redirect("lessons-waiting")


@action(REVIEW)
def apply(request, observation_pk: int):
    return _review(request, observation_pk, observation_apply, "applied to its group")


@action(REVIEW)
def drop(request, observation_pk: int):
    return _review(request, observation_pk, observation_drop, "dropped")
