"""Child processes of the bench: a real Celery worker and the simulator's HTTP face.

Each child gets SIGTERM when the bench process dies (PR_SET_PDEATHSIG), so a crashed or
killed bench leaves nothing running; `stop()` ends it by its own pid, never by name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.env import REPO, BenchEnv

PR_SET_PDEATHSIG = 1


class ProcessError(RuntimeError):
    pass


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak since start) of a process, in MiB, from /proc."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            figures[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": figures["VmRSS"], "peak_rss_mib": figures["VmHWM"]}


class Worker:
    """`celery -A config worker --pool=solo` on the bench's database and broker: tasks run in this pid."""

    def __init__(self, env: BenchEnv, name: str, *, extra_env: dict[str, str] | None = None) -> None:
        self.env = env
        self.log_path = env.work_dir / f"worker-{name}.log"
        self.name = name
        self.process: subprocess.Popen | None = None
        # Settings of this worker's own (the onboarding case points it at a loopback Grid Proxy).
        self.extra_env = dict(extra_env or {})

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, *, timeout: float = 90.0) -> float:
        """Start and wait until it consumes; returns the seconds it took."""
        self.log_path.write_text("")
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("celery")),
                "-A",
                "config",
                "worker",
                "--pool=solo",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"bench-{self.name}-{os.getpid()}@%h",
                f"--logfile={self.log_path}",
            ],
            cwd=REPO,
            env={**self.env.child_env(), **self.extra_env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.env.work_dir / f"worker-{self.name}.stderr", "w"),
            preexec_fn=_die_with_parent,
        )
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                raise ProcessError(f"the worker exited with {self.process.returncode}; see {self.log_path}")
            if " ready." in self.log_path.read_text(errors="replace"):
                return time.perf_counter() - started
            time.sleep(0.1)
        self.stop()
        raise ProcessError(f"the worker was not ready within {timeout:.0f} s; see {self.log_path}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def memory(self) -> dict[str, float]:
        return memory_mib(self.pid)

    def stop(self, *, timeout: float = 20.0) -> None:
        _stop(self.process, timeout=timeout)


class SimulatorServer:
    """The simulator's HTTP face (sim.grid.serve_simulator) in its own process, on loopback."""

    def __init__(
        self, env: BenchEnv, *, nodelay: bool = False, path: Path | None = None, latency_ms: int = 0, arrivals: str = ""
    ) -> None:
        self.env = env
        self.arrivals = arrivals
        self.nodelay = nodelay
        self.path = path or env.simgrid_path
        self.latency_ms = latency_ms
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, *, timeout: float = 30.0) -> str:
        options = [
            *(["--nodelay"] if self.nodelay else []),
            *([f"--latency-ms={self.latency_ms}"] if self.latency_ms else []),
            *([f"--arrivals={self.arrivals}"] if self.arrivals else []),
        ]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.simserve", str(self.path), *options],
            cwd=REPO,
            env=self.env.child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=open(self.env.work_dir / "simserve.stderr", "w"),
            text=True,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and not line:
            line = self.process.stdout.readline().strip()
            if self.process.poll() is not None:
                break
        if not line.isdigit():
            _stop(self.process, timeout=5)
            raise ProcessError(f"the simulator's HTTP face did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{line}"
        return self.url

    def stop(self) -> None:
        _stop(self.process, timeout=5)


def _stop(process: subprocess.Popen | None, *, timeout: float) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
