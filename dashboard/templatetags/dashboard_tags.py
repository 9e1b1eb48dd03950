"""Template filters for capacity figures (GiB for reading, exact bytes for hovering), and the fleet map's farms."""

from html import escape
from urllib.parse import urlencode

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe

from dashboard import capacity
from dashboard.figures.selectors.fleet_map import STATES
from dashboard.grid.text import char_escape, char_name, text_escaped_parts
from dashboard.nodes.reading_age import reading_rules_words

register = template.Library()


@register.filter
def size(value) -> str:
    """'27.9 GiB' from a byte count; an em dash when unknown."""
    if value is None or value == "":
        return "—"
    return capacity.format_size(int(value))


@register.filter
def visible(value) -> str:
    """Text someone else wrote (a reported ZOS error, a job's error), HTML-escaped, with every bidi
    control, control and invisible character shown as its escape in a marked span: U+202E would
    otherwise turn the rest of the line round on the page ("gnp.exe" read as "exe.png")."""
    if value is None:
        return ""
    pieces = []
    for piece, hidden in text_escaped_parts(str(value)):
        if hidden:
            pieces.append(
                f'<span class="hidden-char" title="{escape(char_name(piece))}">{escape(char_escape(piece))}</span>'
            )
        else:
            pieces.append(escape(piece, quote=False))
    return mark_safe("".join(pieces))  # every piece is escaped above


@register.filter
def exact_bytes(value) -> str:
    """'29,957,275,648 bytes', for title attributes."""
    if value is None or value == "":
        return "unknown"
    return f"{int(value):,} bytes"


@register.filter
def cores(value) -> str:
    if value is None:
        return "—"
    return f"{value} vCPU" if value == 1 else f"{value} vCPUs"


@register.simple_tag
def reading_max_age_minutes() -> int:
    """READING_MAX_AGE_MINUTES, for the words that explain "uncertain"."""
    return settings.READING_MAX_AGE_MINUTES


@register.simple_tag
def reading_rules() -> str:
    """The two rules of a reading's age in one sentence (dashboard.nodes.reading_age), where either shows."""
    return reading_rules_words()


@register.filter
def age(when) -> str:
    """'3 min ago', '2 h ago', '4 d ago' from a past time: short enough for a table cell."""
    if when is None or when == "":
        return "never"
    seconds = max((timezone.now() - when).total_seconds(), 0)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} d ago"


@register.filter
def duration(delta) -> str:
    """'2.4 s', '3 min 5 s', '1 h 2 min' from a timedelta."""
    if delta is None:
        return "—"
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.simple_tag(takes_context=True)
def query_with(context, **changes) -> str:
    """The current query string with some parameters changed (None or '' removes one)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = value
    encoded = urlencode(sorted((k, v) for k, values in params.lists() for v in values))
    return f"?{encoded}" if encoded else "?"


@register.filter
def pct(thousandths) -> str:
    """SVG coordinates from the bars' thousandths: percentages keep the patterns undistorted."""
    return f"{int(thousandths) / 10:g}%"


@register.filter
def sub_from(value, other) -> int:
    """`nominal|sub_from:deployable` is nominal minus deployable (Django's `add` cannot subtract a variable)."""
    return int(value) - int(other)


@register.simple_tag(takes_context=True)
def map_farms(context, fleet_map) -> str:
    """The fleet map's farms (figures.selectors.fleet_map.FarmGroup), each a section: its heading, then its cells,
    whose HTML the selector made (or kept). Written here rather than as a template loop: at 200 farms the
    loop's variables took longer than the rest of the page; this takes about a millisecond.

    A collapsed map (figures.selectors.fleet_map.FleetMap.collapsed) gives each farm its counts by state and a
    link to its cells: htmx swaps them in (the map view answers an htmx request for one farm with its
    cells alone); without JavaScript the link opens the map of that farm, every cell shown."""
    collapsed = fleet_map.collapsed
    params = context["request"].GET.copy() if collapsed else None
    sections = []
    for farm in fleet_map.farms:
        if collapsed:
            params["farm"] = farm.farm_id
            href = escape(f"{reverse('fleet-map')}?{urlencode(sorted(params.items()))}")
            counts = "".join(
                f'<span class="farm-count" data-state="{state}"><span class="cell-swatch s-{state}" aria-hidden="true">'
                f"</span>{farm.counts[state]:,}</span>"
                for state in STATES
                if farm.counts.get(state)
            )
            cells = (
                f'<div class="map-cells" id="farm-{farm.farm_id}-cells">{counts} '
                f'<a class="button small farm-open" href="{href}" hx-get="{href}" '
                f'hx-target="#farm-{farm.farm_id}-cells" hx-swap="innerHTML">Show its {farm.nodes:,} '
                f"node{'' if farm.nodes == 1 else 's'}</a></div>"
            )
        else:
            cells = f'<div class="map-cells">{farm.cells_html}</div>'
        # The farm's tooltip: its public IPv4 bound, where its IPs were read (nodes.selectors.farm_ips).
        tooltip = f' title="{escape(fleet_map.ipv4[farm.farm_id])}"' if farm.farm_id in fleet_map.ipv4 else ""
        sections.append(
            f'\n    <section class="map-farm" aria-labelledby="farm-{farm.farm_id}" data-farm="{farm.farm_id}">\n'
            f'      <h2 id="farm-{farm.farm_id}" class="map-farm-head"{tooltip}>Farm {farm.farm_id}'
            + (f' <span class="muted">{escape(farm.farm_name)}</span>' if farm.farm_name else "")
            + f'\n        <span class="small muted">{escape(farm.summary)}</span></h2>\n'
            f"      {cells}\n    </section>\n  "
        )
    return mark_safe("".join(sections))


@register.filter
def seconds_words(value) -> str:
    """'45 s', '12 min', '5.2 h', '14.0 days' from a number of seconds (a node's uptime)."""
    if value is None or value == "":
        return "—"
    seconds = max(int(value), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@register.filter
def of(mapping, key):
    """mapping[key] in a template ({{ uptime|of:row.pk }}); None when absent."""
    return (mapping or {}).get(key)
