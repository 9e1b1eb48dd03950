"""The settings the stored figures were computed under, kept with them (FiguresSettings, one row).

A node's stored closure, placeable and phantom counts depend on settings as well as on its reading:
MARKETPLACE_TWIN_ID decides whether a rented node is closed, GRID_BACKEND where readings come from.
Every process must store them under the same values, or one entry point overwrites what the others
show (issue 34: `manage.py precheck 3150` run without `make run`'s MARKETPLACE_TWIN_ID stored 6
placeable slices on a node rented by another twin). A command checks first (`figures_settings_differ`)
and stores nothing when they differ; `manage.py figures_refresh` stores every node's figures again
under its own settings and then records them (`figures_settings_store`), as does the demo's build.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from dashboard.models import FiguresSettings

_KEY = "fleet"


def figures_settings_now() -> dict[str, object]:
    """This process's figure-deciding settings, as stored (JSON values)."""
    return {
        "MARKETPLACE_TWIN_ID": sorted(settings.MARKETPLACE_TWIN_ID),
        "GRID_BACKEND": settings.GRID_BACKEND,
    }


def figures_settings_words(values: dict[str, object] | None = None) -> str:
    """'GRID_BACKEND=simulator, MARKETPLACE_TWIN_ID=7' (this process's when none are given)."""
    values = figures_settings_now() if values is None else values

    def one(value):
        if isinstance(value, list):
            return ",".join(str(v) for v in value) or "(unset)"
        return str(value)

    return ", ".join(f"{name}={one(value)}" for name, value in sorted(values.items()))


def figures_settings_differ() -> str | None:
    """None when the stored figures were computed under this process's settings (or none were recorded);
    otherwise the sentence saying which differ and what to do."""
    stored = FiguresSettings.objects.filter(key=_KEY).values_list("values", flat=True).first()
    now = figures_settings_now()
    if stored is None or stored == now:
        return None
    differing = {name: value for name, value in now.items() if stored.get(name) != value}
    kept = {name: stored.get(name) for name in differing}
    return (
        f"the stored figures were computed under {figures_settings_words(kept)}, "
        f"this process has {figures_settings_words(differing)}: "
        "nothing was stored. Run it with the same settings as the web and worker (`make run` keeps them in "
        "VAR_DIR/run.env), or store every node's figures again under these with manage.py figures_refresh"
    )


def figures_settings_store() -> dict[str, object]:
    """Record this process's settings as those of the stored figures (after they were all stored again)."""
    now = figures_settings_now()
    FiguresSettings.objects.update_or_create(key=_KEY, defaults={"values": now, "stored_at": timezone.now()})
    return now
