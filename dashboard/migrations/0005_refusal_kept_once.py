"""A memory refusal that taught something is kept once, as its Observation (issue 46).

Until now it was also copied into a CapacitySample (source "refusal") for calibration. Calibration now
reads the memory Observations themselves (policies.services.calibration.readings_by_node), so each copy
is folded back into its observation, which takes the SSD accounted then (`used_sru`, the one figure the
copy had that it lacked), and the copy is deleted. A copy is matched to its observation by node, time
and VM count (both were dated by the refusal). A refusal that taught nothing keeps its sample: it has
no observation. Backwards, the copies are written again from the observations.
"""

from django.db import migrations

MEMORY = "memory"
HELD = "held"


def copies_folded(apps, schema_editor):
    CapacitySample = apps.get_model("dashboard", "CapacitySample")
    Observation = apps.get_model("dashboard", "Observation")
    copies = {(s.node_id, s.at, s.vm_count): s for s in CapacitySample.objects.filter(source="refusal").order_by("pk")}
    folded = []
    for observation in Observation.objects.filter(kind=MEMORY, used_sru__isnull=True).order_by("pk"):
        copy = copies.pop((observation.node_id, observation.seen_at, observation.vm_count), None)
        if copy is None:
            continue
        observation.used_sru = copy.used_sru
        observation.save(update_fields=["used_sru"])
        folded.append(copy.pk)
    CapacitySample.objects.filter(pk__in=folded).delete()


def copies_written(apps, schema_editor):
    from dashboard.capacity import refusal_reading  # pure: the conversion the product uses

    CapacitySample = apps.get_model("dashboard", "CapacitySample")
    Observation = apps.get_model("dashboard", "Observation")
    refusals = Observation.objects.filter(kind=MEMORY, usable_mru__isnull=False, used_sru__isnull=False)
    for observation in refusals.exclude(standing=HELD).order_by("pk"):
        reading = refusal_reading(
            vm_count=observation.vm_count,
            total_mru=observation.total_mru,
            accounted_mru=observation.accounted_mru,
            usable_mru=observation.usable_mru,
            used_sru=observation.used_sru,
        )
        node = observation.node
        copy = CapacitySample.objects.create(
            node=node, source="refusal", total_mru=observation.total_mru, total_sru=node.total_sru, **reading._asdict()
        )
        CapacitySample.objects.filter(pk=copy.pk).update(at=observation.seen_at)
    Observation.objects.filter(kind=MEMORY).update(used_sru=None)


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0004_zos_rules_and_lessons")]

    operations = [migrations.RunPython(copies_folded, copies_written)]
