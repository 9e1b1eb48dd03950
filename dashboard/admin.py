"""The Django admin: every model, read-only where a row is a record of what happened.

The node list shows nominal against deployable slices, free, phantom and stale like the
fleet page, with the same selector: a fixed number of queries per page, not one per row.
Catalogs are carved by node_register / node_reregister, never typed in here, so nodes are
not added from the admin and occupied slices (someone's VM) cannot be edited or deleted.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from dashboard import capacity
from dashboard.catalogs.services.slices import node_slices_write, slice_edit, slices_delete
from dashboard.figures.selectors.fleet import NOMINAL, NodeRow, fleet_rows
from dashboard.figures.services.node_writes import figures_follow
from dashboard.models import ApiToken, AuditEvent, CapacitySample, Deployment, Job, Node, Policy, Slice
from dashboard.views.auth import AdminLoginForm

admin.site.site_header = "Slice catalog administration"
admin.site.site_title = "Slice catalog"
# Refuses a username longer than any account's as a wrong login, counted by the throttle.
admin.site.login_form = AdminLoginForm


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records of what happened: viewed, filtered and searched, never edited here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def _gib(n: int | None) -> str:
    return "—" if n is None else capacity.format_size(n)


# --- nodes and their catalogs --------------------------------------------------------------


class SliceInlineForm(forms.ModelForm):
    class Meta:
        model = Slice
        fields = ("index", "cru", "mru", "sru", "state", "rented_by_twin_id")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.is_occupied:
            for field in self.fields.values():
                field.disabled = True
        elif self.instance.pk:
            # A slice's number is its identity (failure rows name it): never renumbered.
            self.fields["index"].disabled = True


class SliceInlineFormSet(forms.BaseInlineFormSet):
    def clean(self):
        super().clean()
        for form in self.forms:
            if form.instance.pk and form.instance.is_occupied and self._should_delete_form(form):
                raise ValidationError(
                    f"slice {form.instance.index} is {form.instance.state}: it is someone's VM and cannot be deleted here"
                )
            index = form.cleaned_data.get("index") if hasattr(form, "cleaned_data") else None
            if not form.instance.pk and index is not None and index < self.instance.slice_index_next:
                raise ValidationError(
                    f"slice number {index} was used before on this node and is never reused (a failure record may "
                    f"name it); the next free number is {self.instance.slice_index_next}"
                )


class SliceInline(admin.TabularInline):
    model = Slice
    form = SliceInlineForm
    formset = SliceInlineFormSet
    extra = 0
    ordering = ("index",)
    readonly_fields = ("size", "generation")
    fields = ("index", "cru", "mru", "sru", "size", "state", "rented_by_twin_id", "generation")

    @admin.display(description="size")
    def size(self, obj: Slice) -> str:
        if not obj.pk:
            return ""
        return f"{obj.cru} vCPU / {_gib(obj.mru)} / {_gib(obj.sru)}"


class FarmFilter(admin.SimpleListFilter):
    title = "farm"
    parameter_name = "farm"

    def lookups(self, request, model_admin):
        farms = Node.objects.order_by("farm_id").values_list("farm_id", "farm_name").distinct()
        named: dict[int, str] = {}
        for farm_id, farm_name in farms:
            named[farm_id] = named.get(farm_id) or farm_name
        return [(str(farm_id), f"{farm_id} {name}".strip()) for farm_id, name in named.items()]

    def queryset(self, request, queryset):
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(farm_id=int(value))
        return queryset


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = (
        "grid_id",
        "farm",
        "status",
        "nominal_vs_deployable",
        "free",
        "phantom",
        "stale",
        "seen_at",
    )
    list_display_links = ("grid_id",)
    list_filter = ("status", FarmFilter, "dedicated")
    search_fields = ("=grid_id", "farm_name")
    search_help_text = "A node id (exact) or part of a farm name"
    ordering = ("grid_id",)
    inlines = [SliceInline]
    readonly_fields = (
        "grid_id",
        "farm_id",
        "total_words",
        "pools_sru",
        "figures",
        "used_words",
        "seen_at",
        "reported_at",
        "placeable_now",
        "phantom_slices",
        "prechecked_at",
        "carved_policy_name",
        "carved_policy_version",
        "carved_slice_sru",
        "carved_deployable",
        "catalog_generation",
        "registered_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("grid_id", "farm_id", "farm_name", "twin_id", "status", "dedicated", "rented_by_twin_id")}),
        ("Capacity", {"fields": ("total_words", "pools_sru", "figures", "used_words", "seen_at", "reported_at")}),
        ("Latest precheck", {"fields": ("placeable_now", "phantom_slices", "prechecked_at")}),
        (
            "Catalog",
            {
                "fields": (
                    "carved_policy_name",
                    "carved_policy_version",
                    "carved_slice_sru",
                    "carved_deployable",
                    "catalog_generation",
                )
            },
        ),
        ("Where", {"fields": ("country", "city", "registered_at", "updated_at")}),
    )

    def has_add_permission(self, request) -> bool:
        # A node is registered with its carved catalog: manage.py node_register.
        return False

    def save_formset(self, request, form, formset, change):
        if formset.model is not Slice:
            return super().save_formset(request, form, formset, change)
        # The inline's slices are written by catalogs.services.slices: locked, audited, the generation moved on.
        formset.save(commit=False)
        node_slices_write(
            node=form.instance,
            added=formset.new_objects,
            changed=formset.changed_objects,
            deleted=formset.deleted_objects,
            by=request.user,
        )

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        figures_follow([form.instance.pk])  # the node's own columns may have changed its figures

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(nominal=NOMINAL)

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        # The page's figures in the selector's fixed number of queries, not one per row.
        nodes = list(changelist.result_list)
        rows = fleet_rows(node_pks=[n.pk for n in nodes])
        for node in nodes:
            node.fleet_row = rows.get(node.pk)
        return changelist

    def _row(self, obj: Node) -> NodeRow | None:
        row = getattr(obj, "fleet_row", None)
        if row is None and obj.pk:
            row = fleet_rows(node_pks=[obj.pk]).get(obj.pk)
            obj.fleet_row = row
        return row

    @admin.display(description="farm", ordering="farm_id")
    def farm(self, obj: Node) -> str:
        return f"{obj.farm_id} {obj.farm_name}".strip()

    @admin.display(description="nominal → deployable", ordering="nominal")
    def nominal_vs_deployable(self, obj: Node) -> str:
        row = self._row(obj)
        if row is None:
            return "—"
        gap = f" ({row.gap} over)" if row.gap > 0 else ""
        return f"{row.nominal} → {row.deployable}{gap}"

    @admin.display(description="free", ordering="slices_free")
    def free(self, obj: Node) -> int | str:
        row = self._row(obj)
        return row.free if row else "—"

    @admin.display(description="phantom", ordering="phantom_slices", empty_value="unknown")
    def phantom(self, obj: Node) -> int | None:
        return obj.phantom_slices

    @admin.display(description="stale", boolean=True)
    def stale(self, obj: Node) -> bool | None:
        row = self._row(obj)
        return row.stale if row else None

    @admin.display(description="total")
    def total_words(self, obj: Node) -> str:
        return (
            f"{obj.total_cru} cores, {_gib(obj.total_mru)} memory, {_gib(obj.total_sru)} SSD, {_gib(obj.total_hru)} HDD"
        )

    @admin.display(description="used (as the grid reports it)")
    def used_words(self, obj: Node) -> str:
        if obj.used is None:
            return "never read"
        return f"{_gib(obj.used_mru)} memory, {_gib(obj.used_sru)} SSD"

    @admin.display(description="slices")
    def figures(self, obj: Node) -> str:
        row = self._row(obj)
        if row is None:
            return "—"
        words = (
            f"{row.nominal} in the catalog, {row.deployable} deployable under {row.policy}; "
            f"{row.free} free, {row.rented} rented, {row.deployed} deployed, {row.failed} failed"
        )
        return words + (f". Stale: {row.stale_reason}" if row.stale else ". Catalog current.")


@admin.register(Slice)
class SliceAdmin(admin.ModelAdmin):
    list_display = ("node", "index", "cru", "size", "state", "rented_by_twin_id", "generation", "updated_at")
    list_filter = ("state", "generation")
    search_fields = ("=node__grid_id",)
    list_select_related = ("node",)
    ordering = ("node__grid_id", "index")
    raw_id_fields = ("node",)
    # Which node and which number a slice is are its identity (failure rows name it): not edited here.
    readonly_fields = ("node", "index", "generation")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_occupied:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_occupied:
            return False
        return super().has_delete_permission(request, obj)

    # Every write goes through catalogs.services.slices: the node locked, the catalog's generation moved on
    # (a re-register planned before the edit refuses to overwrite it), the figures refreshed, audited.
    def delete_queryset(self, request, queryset):
        # The bulk action must not remove someone's VM either.
        slices_delete(slice_pks=queryset.values_list("pk", flat=True), by=request.user)

    def save_model(self, request, obj, form, change):
        slice_edit(slice_=obj, fields=form.changed_data, by=request.user)

    def delete_model(self, request, obj):
        slices_delete(slice_pks=[obj.pk], by=request.user)

    @admin.display(description="memory / disk")
    def size(self, obj: Slice) -> str:
        return f"{_gib(obj.mru)} / {_gib(obj.sru)}"


# --- policies ------------------------------------------------------------------------------


class PolicyForm(forms.ModelForm):
    class Meta:
        model = Policy
        fields = ("name", "scope", "farm_id", "node", *Policy.PARAMETERS, *Policy.CARRIES)

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        if not self.instance.pk and data.get("name") in capacity.PROFILES:
            raise ValidationError(f"{data['name']!r} is the name of a built-in profile; choose another name")
        from dashboard.policies.services.policy import policy_carries_checked

        try:
            capacity.Policy(name=data.get("name") or self.instance.name, **{p: data[p] for p in Policy.PARAMETERS})
            policy_carries_checked({c: data[c] for c in Policy.CARRIES})
        except capacity.PolicyError as exc:
            raise ValidationError(str(exc)) from None
        return data


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin):
    """Edits go through the policy services: a changed parameter bumps the version and is audited."""

    form = PolicyForm
    list_display = ("name", "scope", "farm_id", "node", "version", "slice", "reserve", "updated_at")
    list_filter = ("scope",)
    search_fields = ("name",)
    list_select_related = ("node",)
    raw_id_fields = ("node",)

    def get_readonly_fields(self, request, obj=None):
        # Who a policy applies to is fixed once made; make another policy to change it.
        return ("name", "scope", "farm_id", "node", "version", "updated_at") if obj else ("version", "updated_at")

    @admin.display(description="slice")
    def slice(self, obj: Policy) -> str:
        return f"{obj.slice_cru} vCPU / {_gib(obj.slice_mru)}"

    @admin.display(description="memory reserve")
    def reserve(self, obj: Policy) -> str:
        return f"max({obj.reserve_mru_percent}%, {_gib(obj.reserve_mru_floor)}); SSD {_gib(obj.reserve_sru)}"

    def save_model(self, request, obj, form, change):
        from dashboard.policies.services.policy import policy_create, policy_update

        parameters = {p: form.cleaned_data[p] for p in Policy.PARAMETERS}
        carries = {c: form.cleaned_data[c] for c in Policy.CARRIES}
        if change:
            saved, _changed = policy_update(
                policy=obj, parameters=parameters, carries=carries, by=request.user, source="admin"
            )
        else:
            saved = policy_create(
                name=obj.name,
                scope=obj.scope,
                parameters=parameters,
                carries=carries,
                farm_id=obj.farm_id,
                node=obj.node,
                by=request.user,
                source="admin",
            )
        obj.pk, obj.version = saved.pk, saved.version

    def delete_model(self, request, obj):
        self.delete_queryset(request, [obj])

    def delete_queryset(self, request, queryset):
        from dashboard.policies.services.policy import PolicyConflict, policy_delete

        for policy in queryset:
            try:
                policy_delete(policy=policy, by=request.user, source="admin")
            except PolicyConflict as refused:  # its figures are being rewritten: kept, and said why
                self.message_user(request, str(refused), level=messages.ERROR)


# --- records: deployments, jobs, samples, audit ---------------------------------------------


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "node", "slice_index", "state", "cause", "error", "requested_by", "finished_at")
    list_filter = ("state", "cause")
    search_fields = ("raw_error", "=node__grid_id")
    search_help_text = "Words of the raw grid error, or a node id"
    list_select_related = ("node", "requested_by")
    date_hierarchy = "started_at"

    @admin.display(description="raw error")
    def error(self, obj: Deployment) -> str:
        return obj.raw_error if len(obj.raw_error) <= 120 else obj.raw_error[:119] + "…"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "pk",
        "kind",
        "node",
        "farm_id",
        "state",
        "step",
        "progress",
        "requested_by",
        "created_at",
        "finished_at",
    )
    list_filter = ("kind", "state", "source", "dry_run")
    search_fields = ("=node__grid_id", "step", "error")
    list_select_related = ("node", "requested_by")

    @admin.display(description="progress")
    def progress(self, obj: Job) -> str:
        return f"{obj.progress_done}/{obj.progress_total}" if obj.progress_total else ""


@admin.register(CapacitySample)
class CapacitySampleAdmin(ReadOnlyAdmin):
    list_display = ("at", "node", "source", "vm_count", "vm_memory", "used_memory")
    list_filter = ("source",)
    search_fields = ("=node__grid_id",)
    list_select_related = ("node",)

    @admin.display(description="VM memory")
    def vm_memory(self, obj: CapacitySample) -> str:
        return _gib(obj.vm_mru)

    @admin.display(description="used memory")
    def used_memory(self, obj: CapacitySample) -> str:
        return _gib(obj.used_mru)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "action", "actor", "source", "node", "message")
    list_filter = ("action", "source")
    search_fields = ("message", "=node__grid_id", "actor__username")
    list_select_related = ("actor", "node")
    date_hierarchy = "at"


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Seen here; made and revoked on /api-tokens/ (a token is shown once, and both are audited)."""

    list_display = ("prefix", "name", "user", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)
    exclude = ("key_hash",)
