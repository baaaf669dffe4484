"""A model server the flywheel starts for a run and stops after (the config's ``serve``):
``transformers serve`` on a CPU, ``vllm serve`` on a GPU, or any OpenAI-compatible server that
takes ``--host`` and ``--port``. It runs in its own process group, its output goes to a log
file, and the run waits for its health check; a server that exits or stays silent is refused
with its log's last line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flywheel.config.tree import ServeConfig


class ServerError(Exception):
    """The configured server did not come up."""


def executable(name: str) -> str:
    """``name`` on the PATH, else beside this Python (a venv's ``transformers`` when the venv is
    not activated), else ``name`` itself (Popen then says it is missing)."""
    if os.sep in name:
        return name
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def base_url(cfg: ServeConfig) -> str:
    """The OpenAI-compatible base URL of the server (``http://host:port/v1``)."""
    return f"http://{cfg.host}:{cfg.port}/v1"


def last_line(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def stop(proc: subprocess.Popen) -> None:
    """Stop the server and whatever it started (its process group): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start(cfg: ServeConfig, log: Path) -> subprocess.Popen:
    """Start the server, its output to ``log``, and wait until its health check answers 200.
    Raises ServerError (the server stopped) when it exits or does not answer in time."""
    origin = f"http://{cfg.host}:{cfg.port}"
    if healthy(origin + cfg.health_path):
        raise ServerError(f"serve: something already answers on {origin}; stop it, or set serve.port to a free port "
                          "(or leave serve.command empty to use that server)")
    cmd = [executable(cfg.command[0]), *cfg.command[1:], "--host", cfg.host, "--port", str(cfg.port)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as out:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,  # a server killed keeps its log whole:
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as e:
            raise ServerError(f"serve.command: cannot start {cfg.command[0]}: {e.strerror or e}") from None
    deadline = time.monotonic() + cfg.startup_timeout_s
    while not healthy(origin + cfg.health_path):
        if proc.poll() is not None:
            raise ServerError(f"serve: the server exited with code {proc.returncode} before answering "
                              f"{origin}{cfg.health_path}: {last_line(log)} (its log: {log})")
        if time.monotonic() > deadline:
            stop(proc)
            raise ServerError(f"serve: the server did not answer {origin}{cfg.health_path} within "
                              f"{cfg.startup_timeout_s:g} s (serve.startup_timeout_s): {last_line(log)} (its log: {log})")
        time.sleep(0.5)
    return proc


@contextmanager
def serving(cfg: ServeConfig, log: Path) -> Iterator[subprocess.Popen | None]:
    """The configured server for the body's duration (None where ``serve.command`` is empty)."""
    if not cfg.command:
        yield None
        return
    proc = start(cfg, log)
    try:
        yield proc
    finally:
        stop(proc)
