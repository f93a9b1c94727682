"""Run a list of independent tasks in two processes, the answers in order, as one process would.

Notes
-----
Reading a large YAML node list is a few seconds of parsing in C++ (rapidyaml) and C (msgspec),
chunk by chunk, each chunk on its own: the second core of a machine can take half of them. A
worker forked from this process (it sees the bytes already read, nothing is copied) runs the
second half and writes each answer, encoded, to a file in memory (never a pipe: a pipe of 64 KB
stalls the worker until this process, busy with its own half, reads it), read here once both
halves are done.

The worker never decides anything: when it fails on a task (an input error, a chunk for the
slower reader, anything at all) it stops, and this process runs that task and the ones after it
itself, so the error raised, and its message, are exactly those of one process. A worker that
dies or writes a short answer is treated the same way. With one usable core, or one task, there
is no worker; nor when the machine is already busy (a load average above its cores less one): on
a shared machine of two cores at load 5, two processes each ran at half the speed of one, so the
worker only added its own costs (fork, encoding; 4-9% more CPU, no less wall).
"""

from __future__ import annotations

import os
import signal
import struct
import tempfile
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_LENGTH = struct.Struct("<Q")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def spare_core() -> bool:
    """Whether a second process would run beside this one rather than share its time."""
    n = cores()
    return n >= 2 and os.getloadavg()[0] <= n - 1


def in_two(
    tasks: Sequence[T],
    run: Callable[[T], R],
    encode: Callable[[R], bytes],
    decode: Callable[[bytes], R],
) -> list[R]:
    """``[run(t) for t in tasks]``, the second half run by a forked worker when a second core is
    free; what the worker does not deliver is run here."""
    if len(tasks) < 2 or not hasattr(os, "fork") or not spare_core():
        return [run(t) for t in tasks]
    half = (len(tasks) + 1) // 2
    fd = _memory_file()
    pid = os.fork()
    if pid == 0:  # the worker: answers until the first failure, then nothing more
        code = 0
        try:
            for task in tasks[half:]:
                payload = encode(run(task))
                _write_all(fd, _LENGTH.pack(len(payload)) + payload)
        except BaseException:  # this process runs it again and raises what it raises
            code = 1
        finally:
            os._exit(code)
    done = False
    try:
        answers = [run(t) for t in tasks[:half]]
        done = True
    finally:
        if not done:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        try:
            received = _read_all(fd) if done else b""
        finally:
            os.close(fd)
    stream = memoryview(received)
    at = 0
    for task in tasks[half:]:
        if at + _LENGTH.size > len(stream):
            answers.append(run(task))
            continue
        (length,) = _LENGTH.unpack_from(stream, at)
        if at + _LENGTH.size + length > len(stream):
            at = len(stream)
            answers.append(run(task))
            continue
        at += _LENGTH.size
        answers.append(decode(bytes(stream[at : at + length])))
        at += length
    return answers


def _memory_file() -> int:
    """A file descriptor of an empty file in memory (or in the temporary directory)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("gpuplan-half", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as f:
        return os.dup(f.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    """The whole file, from its start (the worker's writes moved the offset both share)."""
    size = os.fstat(fd).st_size
    parts = []
    at = 0
    while at < size and (part := os.pread(fd, size - at, at)):
        parts.append(part)
        at += len(part)
    return b"".join(parts)
