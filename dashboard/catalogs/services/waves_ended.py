"""A run in waves that ended before its waves did: what it and its waves read from then on.

The bulk re-register's declaration names `waves_stopped` as what its failed jobs do (job_kinds, `when_failed`:
an error, its worker lost, never queued); catalogs.services.reregister.waves ends the waves of a run an admin stopped.
Neither the run nor a wave of it reads "running" once nothing runs it.
"""

from __future__ import annotations

from dashboard.models import WaveRun

_ENDED = {"running": "stopped", "pending": "not reached"}


def wave_entries_ended(waves: list[dict]) -> list[dict]:
    """The run's waves once it ended before them: the one in hand "stopped", those never started "not reached"."""
    return [{**wave, "state": _ENDED.get(wave.get("state"), wave.get("state"))} for wave in waves]


def waves_stopped(*, job_id: int) -> None:
    """The job's run in waves, if one is still open, stopped with its waves ended (inside the caller's
    transaction, which closes the job)."""
    run = WaveRun.objects.filter(job_id=job_id).exclude(state__in=(WaveRun.State.STOPPED, WaveRun.State.DONE))
    for wave in run.select_for_update():
        WaveRun.objects.filter(pk=wave.pk).update(state=WaveRun.State.STOPPED, waves=wave_entries_ended(wave.waves))


__all__ = ["wave_entries_ended", "waves_stopped"]
