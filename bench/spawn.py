"""Run a command as a separate process and measure it: wall time, CPU time, peak RSS.

Why not ``wait4`` on the command itself: Linux counts a child's peak RSS from the moment it was
forked, when it is a copy of its parent, so every command the bench starts would report at least
the bench's own size at that moment (a 300 MB parent makes ``python -c pass`` report 313 MB).
Here a small launcher (a bare ``python -S``, under 10 MB) forks the command and reports its
``wait4`` figures: the command's own peak and its descendants', never the bench's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO

LAUNCHER = """
import json, os, sys
out, cmd = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.close(out)
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
os.write(out, json.dumps([usage.ru_maxrss, usage.ru_utime + usage.ru_stime]).encode())
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class Measured:
    returncode: int  # -1 when it was killed at its deadline
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    timed_out: bool = False


def launch(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    stdout: IO[bytes] | int | None = None,
    stderr: IO[bytes] | int | None = None,
    timeout: float | None = None,
) -> Measured:
    """Run ``cmd`` to its end (or kill it, with everything it started, after ``timeout`` s)."""
    read, write = os.pipe()
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", LAUNCHER, str(write), *cmd],
        stdout=stdout,
        stderr=stderr,
        env=env,
        pass_fds=(write,),
        start_new_session=True,
    )
    os.close(write)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(read)
        return Measured(-1, time.monotonic() - start, 0.0, 0.0, timed_out=True)
    wall = time.monotonic() - start
    with os.fdopen(read, "rb") as figures:
        raw = figures.read()
    if not raw:
        raise SystemExit(f"{' '.join(cmd)}: the launcher reported nothing (exit {proc.returncode})")
    peak_kb, cpu = json.loads(raw)
    return Measured(proc.returncode, wall, float(cpu), peak_kb / 1024)
