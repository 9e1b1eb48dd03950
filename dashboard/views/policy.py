"""The policy page: the fleet default and overrides; admins edit one after seeing what it would do."""

import hashlib
import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from dashboard import capacity
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Node, Policy, PolicyVersion
from dashboard.nodes.selectors.farm_ips import Carries
from dashboard.policies.selectors.policy import (
    policies_in_force,
    policy_figures_active,
    policy_for_edit,
    policy_preview,
)
from dashboard.policies.services.policy import MAX_PUBLIC_IPV4, SIZE_PARAMETERS, policy_create, policy_update
from dashboard.policies.services.policy_trial import policy_trial_parameters
from dashboard.views.action import action
from dashboard.views.page import page


def size_text(n: int) -> str:
    """The exact size in the largest unit that divides it, so an untouched field saves the same bytes."""
    for unit, size in (("TiB", capacity.TiB), ("GiB", capacity.GiB), ("MiB", capacity.MiB), ("KiB", capacity.KiB)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


class SizeField(forms.CharField):
    """A size typed like '4GiB', '512MiB' or '931.5GiB' (1024-based), parsed by capacity.parse_size."""

    def __init__(self, *, what: str, allow_zero: bool = True, **kwargs):
        self.what = what
        self.allow_zero = allow_zero
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off", "maxlength": "32"})
        )
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return size_text(value) if isinstance(value, int) else value

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        if len(text) > 32:
            raise forms.ValidationError(f"{self.what}: {text[:32]!r}… is too long for a size", code="size")
        try:
            return capacity.parse_size(text, what=self.what, allow_zero=self.allow_zero)
        except capacity.SizeError as exc:
            raise forms.ValidationError(str(exc), code="size") from None


class PolicyForm(forms.Form):
    slice_mru = SizeField(
        what="slice memory", allow_zero=False, label="Slice memory", help_text="e.g. 4GiB; at least 250MiB"
    )
    slice_cru = forms.IntegerField(min_value=1, max_value=capacity.MAX_VM_CRU, label="vCPUs per slice")
    reserve_mru_percent = forms.IntegerField(
        min_value=0, max_value=90, label="Memory reserve, % of total", help_text="ZOS keeps max(10%, 2GiB)"
    )
    reserve_mru_floor = SizeField(what="memory reserve floor", label="Memory reserve, at least")
    reserve_sru = SizeField(
        what="disk reserve", label="Disk reserve (zos-cache)", help_text="the Grid Proxy counts 20GiB"
    )
    overhead_mru_per_vm = SizeField(what="memory overhead per VM", label="Memory overhead per VM")
    overhead_sru_per_vm = SizeField(what="disk overhead per VM", label="Disk overhead per VM")
    rootfs = forms.ChoiceField(
        choices=[("zos", "ZOS minimum (500MiB or 2GiB)"), ("none", "none")], label="Root filesystem charge"
    )
    min_slice_sru = SizeField(what="smallest slice disk", label="Smallest slice disk")
    sru_step = SizeField(what="disk step", allow_zero=False, label="Round disks down to")
    arithmetic = forms.ChoiceField(
        choices=[("bytes", "bytes (exact)"), ("whole-gib", "whole GiB (legacy carve)")], label="Arithmetic"
    )
    # What a slice carries besides its size (models.Policy.CARRIES): the carve is unchanged by them.
    public_ipv4 = forms.IntegerField(
        min_value=0,
        max_value=MAX_PUBLIC_IPV4,
        label="Public IPv4s a slice",
        help_text="taken from the farm's pool, which all its nodes share; 0 for none",
    )
    ipv4_addon = forms.BooleanField(
        required=False, label="IPv4 add-on", help_text="the same slice also sells with one more public IPv4"
    )
    gpu_slices = forms.BooleanField(
        required=False, label="GPU slices", help_text="one GPU a slice, only on nodes the marketplace rents"
    )

    def __init__(self, *args, name: str = "policy", **kwargs):
        self.policy_name = name
        super().__init__(*args, **kwargs)

    def clean(self):
        cleaned = super().clean()
        if not self.errors:
            try:
                cleaned["candidate"] = capacity.Policy(name=self.policy_name, **self.parameters(cleaned))
            except capacity.PolicyError as exc:
                raise forms.ValidationError(str(exc)) from None
        return cleaned

    @staticmethod
    def parameters(cleaned: dict) -> dict:
        return {p: cleaned[p] for p in Policy.PARAMETERS}

    @staticmethod
    def carries(cleaned: dict) -> dict:
        return {c: cleaned[c] for c in Policy.CARRIES}

    @classmethod
    def initial_from(cls, policy: capacity.Policy | Policy) -> dict:
        # A built-in profile (capacity.Policy) carries nothing: the model's defaults.
        carries = {c: getattr(policy, c, getattr(Carries(), c)) for c in Policy.CARRIES}
        return {**{p: getattr(policy, p) for p in Policy.PARAMETERS}, **carries}


class NewPolicyForm(PolicyForm):
    name = forms.SlugField(max_length=64, label="Name", help_text="e.g. farm-12 or node-1774")
    scope = forms.ChoiceField(choices=Policy.Scope.choices)
    # Policy.farm_id is a PositiveIntegerField: a larger id would fail the insert (a 500) instead of the form.
    farm_id = forms.IntegerField(min_value=0, max_value=2_147_483_647, required=False, label="Farm id (farm override)")
    node_id = forms.IntegerField(min_value=0, required=False, label="Node id (node override)")

    field_order = ["name", "scope", "farm_id", "node_id"]

    def clean(self):
        self.policy_name = self.cleaned_data.get("name") or "policy"
        cleaned = super().clean()
        scope = cleaned.get("scope")
        if scope == Policy.Scope.FARM and cleaned.get("farm_id") is None:
            self.add_error("farm_id", "A farm override needs the farm id.")
        if scope == Policy.Scope.NODE:
            node_id = cleaned.get("node_id")
            if node_id is None:
                self.add_error("node_id", "A node override needs the node id.")
            else:
                cleaned["node"] = Node.objects.filter(grid_id=node_id).first()
                if cleaned["node"] is None:
                    self.add_error("node_id", f"Node {node_id} is not registered.")
        return cleaned


@page("dashboard.view_policy")
@vary_on_headers("HX-Request")
def policy_list(request):
    policies = policies_in_force()
    context = {"section": "policy", "policies": policies, "rewrites": [p for p in policies if p.rewrite is not None]}
    # The rewrites' progress polls itself (htmx) until no rewrite is active.
    template = "dashboard/policy.html#rewrites" if getattr(request, "htmx", False) else "dashboard/policy.html"
    return render(request, template, context)


def _tell_what_was_saved(request, saved: Policy, *, changed: bool, bumped: bool) -> None:
    """Tell the person what the save did: carries only, a new version whose figures a job rewrites, a new
    version, or nothing."""
    rewrite = policy_figures_active([saved.pk]).get(saved.pk) if bumped else None
    if changed and not bumped:
        messages.success(
            request,
            f"Saved what {saved.name}'s slices carry; it stays at v{saved.version}, since no catalog goes "
            "stale by it. IPv4 slices are bounded by each farm's free public IPv4s.",
        )
    elif rewrite is not None:
        messages.success(
            request,
            f"Saved {saved.name} v{saved.version}. Its nodes' figures are being rewritten (job #{rewrite.pk}, "
            "progress below); the fleet pages show the change when it ends, and catalogs carved under the "
            "old version are stale from then.",
        )
    elif changed:
        messages.success(
            request,
            f"Saved {saved.name} v{saved.version}. Catalogs carved under the old version are now stale; "
            "re-register them from the fleet page.",
        )
    else:
        messages.info(request, f"Nothing changed: {saved.name} stays at v{saved.version}.")


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("dashboard.change_policy", raise_exception=True)
def policy_edit(request, policy_id: int):
    """GET: the form. POST: the preview; a second POST with the previewed values saves."""
    row = _policy_or_404(policy_id)
    # A revert from the policy history: the old version's values, previewed like any edit, then saved as new.
    revert_from = _revert_from(request.POST.get("revert_from"), row) if request.method == "POST" else None
    context = {"section": "policy", "row": row, "revert_from": revert_from}
    if request.method == "GET":
        form = PolicyForm(initial=PolicyForm.initial_from(row), name=row.name)
        return render(request, "dashboard/policy_edit.html", {**context, "form": form})

    form = PolicyForm(request.POST, name=row.name)
    if not form.is_valid():
        return render(request, "dashboard/policy_edit.html", {**context, "form": form}, status=400)
    parameters = PolicyForm.parameters(form.cleaned_data)
    carries = PolicyForm.carries(form.cleaned_data)
    token = _preview_token(row.pk, row.version, {**parameters, **carries})
    if "save" in request.POST and request.POST.get("preview_token") == token:
        try:
            saved, changed = policy_update(
                policy=row,
                parameters=parameters,
                carries=carries,
                expected_version=row.version,
                by=request.user,
                source="web",
                reverted_from=revert_from,
            )
        except capacity.PolicyError as exc:
            form.add_error(None, str(exc))
            return render(request, "dashboard/policy_edit.html", {**context, "form": form}, status=409)
        _tell_what_was_saved(request, saved, changed=changed, bumped=saved.version != row.version)
        return redirect("policy")
    # Any other POST (or one whose values differ from what was previewed) shows the preview first.
    changes = _changes(row, {**parameters, **carries})
    # Unchanged values keep the version: saving them changes nothing, so nothing would go stale, and
    # the page offers no save (a bumped version made every catalog look stale-to-be, issue 25). What the
    # slices carry keeps it too: it stales no catalog.
    bumps = bool(_changes(row, parameters))
    version = row.version + 1 if bumps else row.version
    candidate = capacity.with_overrides(form.cleaned_data["candidate"], version=version)
    preview = policy_preview(
        candidate=candidate, scope=row.scope, farm_id=row.farm_id, node=row.node, carries=Carries(**carries)
    )
    context |= {
        "form": form,
        "preview": preview,
        "preview_token": token,
        "changes": changes,
        "unchanged": not changes,
        "bumps": bumps,
    }
    return render(request, "dashboard/policy_edit.html", context)


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("dashboard.add_policy", raise_exception=True)
def policy_new(request):
    """A new fleet default or override, with the same preview before saving."""
    context = {"section": "policy", "row": None}
    if request.method == "GET":
        base = Policy.objects.filter(scope=Policy.Scope.FLEET).first()
        initial = PolicyForm.initial_from(base if base else capacity.profile(capacity.DEFAULT_PROFILE))
        scope = request.GET.get("scope") if request.GET.get("scope") in Policy.Scope.values else Policy.Scope.FARM
        # A proposal from a node page: what that node's refusals taught, for the admin to preview.
        proposed = {}
        if request.GET.get("overhead_mru_per_vm"):
            try:
                proposed["overhead_mru_per_vm"] = capacity.parse_size(request.GET["overhead_mru_per_vm"])
            except capacity.SizeError:
                pass  # the form shows the fleet default's value instead
        form = NewPolicyForm(initial={**initial, **proposed, "scope": scope, "farm_id": request.GET.get("farm")})
        return render(request, "dashboard/policy_edit.html", {**context, "form": form})

    form = NewPolicyForm(request.POST)
    if not form.is_valid():
        return render(request, "dashboard/policy_edit.html", {**context, "form": form}, status=400)
    data = form.cleaned_data
    parameters = PolicyForm.parameters(data)
    carries = PolicyForm.carries(data)
    target = (data["name"], data["scope"], data.get("farm_id"), data.get("node_id"))
    token = _preview_token(0, 0, {**parameters, **carries, "target": target})
    if "save" in request.POST and request.POST.get("preview_token") == token:
        try:
            created = policy_create(
                name=data["name"],
                scope=data["scope"],
                farm_id=data.get("farm_id"),
                node=data.get("node"),
                parameters=parameters,
                carries=carries,
                by=request.user,
                source="web",
            )
        except capacity.PolicyError as exc:
            form.add_error(None, str(exc))
            return render(request, "dashboard/policy_edit.html", {**context, "form": form}, status=409)
        messages.success(request, f"Created {created.name} v1 ({created.get_scope_display().lower()}).")
        return redirect("policy")
    preview = policy_preview(
        candidate=data["candidate"],
        scope=data["scope"],
        farm_id=data.get("farm_id"),
        node=data.get("node"),
        carries=Carries(**carries),
    )
    return render(
        request, "dashboard/policy_edit.html", {**context, "form": form, "preview": preview, "preview_token": token}
    )


@action("dashboard.change_policy")
def policy_trial(request, policy_id: int):
    """Start a policy trial of this change on the nodes the policy governs; the job page shows it."""
    row = _policy_or_404(policy_id)
    form = PolicyForm(request.POST, name=row.name)
    if not form.is_valid():
        return render(
            request, "dashboard/policy_edit.html", {"section": "policy", "row": row, "form": form}, status=400
        )
    candidate = capacity.with_overrides(form.cleaned_data["candidate"], version=row.version + 1)
    return _trial_start(
        request, candidate=candidate, scope=row.scope, farm_id=row.farm_id, node=row.node, policy_id=row.pk
    )


@action("dashboard.add_policy")
def policy_new_trial(request):
    """The same for a policy not saved yet, on the nodes it would govern."""
    form = NewPolicyForm(request.POST)
    if not form.is_valid():
        return render(
            request, "dashboard/policy_edit.html", {"section": "policy", "row": None, "form": form}, status=400
        )
    data = form.cleaned_data
    return _trial_start(
        request, candidate=data["candidate"], scope=data["scope"], farm_id=data.get("farm_id"), node=data.get("node")
    )


def _trial_start(request, *, candidate: capacity.Policy, **scope):
    requested = job_request(
        kind=Job.Kind.SIMULATE,
        by=request.user,
        source="web",
        parameters=policy_trial_parameters(candidate=candidate, **scope),
    )
    if not requested.created:
        messages.info(
            request, "A policy trial is already running (one at a time): here it is. Start yours when it ends."
        )
    return redirect("job", requested.job.pk)


def _policy_or_404(policy_id: int) -> Policy:
    """The policy to edit or try (policies.selectors.policy.policy_for_edit), or a 404 naming it."""
    try:
        return policy_for_edit(policy_id=policy_id)
    except Policy.DoesNotExist:
        raise Http404(f"There is no policy #{policy_id}.") from None


def _revert_from(value, row: Policy) -> int | None:
    """The history version a revert names, when it is one of this policy's; else None (a plain edit)."""
    try:
        version = int(value)
    except (TypeError, ValueError):
        return None
    return version if PolicyVersion.objects.filter(policy=row, version=version).exists() else None


def _preview_token(pk: int, version: int, parameters: dict) -> str:
    """Ties a save to the exact values (and version) that were previewed."""
    canonical = json.dumps([pk, version, parameters], sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _changes(row: Policy, parameters: dict) -> list[tuple[str, str, str]]:
    words = PolicyForm.base_fields
    changes = []
    for name, new in parameters.items():
        old = getattr(row, name)
        if old != new:
            show = capacity.format_size if name in SIZE_PARAMETERS else _yes_no if isinstance(new, bool) else str
            changes.append((str(words[name].label), show(old), show(new)))
    return changes


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"
