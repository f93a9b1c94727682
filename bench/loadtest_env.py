"""What ``bench/loadtest_bench.py`` runs against and with: nginx, vegeta, and timed processes.

* nginx: Debian's ``nginx-light`` (installed with apt-get when missing and we are root), started
  on loopback from a generated config in a temporary directory and stopped on exit. One server
  answers a fixed ``200 ok``; another puts the same answer behind ``limit_req`` at a fixed rate
  with a deep burst queue, so it *delays* what exceeds the rate instead of refusing it - a service
  whose knee is that rate by construction, which nginx can keep while the sender runs on the same
  two cores.
* vegeta: ``go install github.com/tsenart/vegeta/v12@v12.13.0`` into ``~/.cache/gpuplan/bin``
  when it is not on ``PATH``.
* :func:`timed`: a command as a separate process, with its wall time, CPU time and peak RSS from
  ``wait4``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spawn import launch

VEGETA_MODULE = "github.com/tsenart/vegeta/v12@v12.13.0"
CACHE_BIN = Path.home() / ".cache" / "gpuplan" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ensure_nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("nginx is missing: apt-get install nginx-light (needs root)")
    print("installing nginx-light with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another apt-get may hold the lock (a shared machine): wait for it rather than fail.
    subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "nginx-light"],
        check=True,
        env=env,
    )
    return shutil.which("nginx") or "/usr/sbin/nginx"


def ensure_vegeta() -> str:
    found = shutil.which("vegeta") or (str(CACHE_BIN / "vegeta") if (CACHE_BIN / "vegeta").exists() else None)
    if found:
        return found
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise SystemExit(f"vegeta is missing and there is no Go toolchain to 'go install {VEGETA_MODULE}'")
    print(f"go install {VEGETA_MODULE} ...", flush=True)
    CACHE_BIN.mkdir(parents=True, exist_ok=True)
    subprocess.run([go, "install", VEGETA_MODULE], check=True, env={**os.environ, "GOBIN": str(CACHE_BIN)})
    return str(CACHE_BIN / "vegeta")


@dataclass(frozen=True)
class Nginx:
    flat_url: str
    limited_url: str
    limited_rate: int
    pid: int


NGINX_CONF = """
worker_processes 1;
worker_rlimit_nofile 16384;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  limit_req_zone $server_name zone=knee:1m rate={rate}r/s;
  server {{
    listen 127.0.0.1:{flat};
    server_name flat;
    location / {{ return 200 "ok"; }}
  }}
  server {{
    listen 127.0.0.1:{limited};
    server_name limited;
    # limit_req runs before the content phase, 'return' before it: so the answer comes from a
    # named location reached through try_files, after the request has waited its turn.
    location / {{ limit_req zone=knee burst=100000; try_files /nonexistent @ok; }}
    location @ok {{ return 200 "ok"; }}
  }}
}}
"""


@contextlib.contextmanager
def nginx(limited_rate: int) -> Iterator[Nginx]:
    binary = ensure_nginx()
    with tempfile.TemporaryDirectory(prefix="gpuplan-nginx-") as d:
        flat, limited = free_port(), free_port()
        conf = Path(d) / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=d, rate=limited_rate, flat=flat, limited=limited))
        proc = subprocess.Popen([binary, "-c", str(conf), "-p", d], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", limited), timeout=0.5):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        why = proc.stderr.read() if proc.stderr else ""
                        raise SystemExit(f"nginx did not start: {why}") from None
                    time.sleep(0.05)
            yield Nginx(f"http://127.0.0.1:{flat}/", f"http://127.0.0.1:{limited}/", limited_rate, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass(frozen=True)
class Timed:
    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    stdout: str
    stderr: str


def timed(cmd: list[str], *, env: dict[str, str] | None = None) -> Timed:
    """Run ``cmd`` as a separate process; its wall time, CPU time and peak RSS (:mod:`spawn`).

    CPU time and peak RSS are ``wait4``'s: the process's own and those of the processes it
    waited for (the load tester's coordinator waits for its senders: the largest of them).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        m = launch(cmd, env=env, stdout=out, stderr=err)
        out.seek(0)
        err.seek(0)
        return Timed(
            m.returncode,
            m.wall_s,
            m.cpu_s,
            m.peak_rss_mb,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )
