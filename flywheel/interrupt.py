"""Ctrl-C (or a SIGTERM) ends `flywheel run` at once, with the command that continues it.

A terminal's Ctrl-C, like `timeout` or a service manager's SIGTERM, reaches the whole process group,
Prefect's temporary server too. Left to Python's KeyboardInterrupt or Prefect's SIGTERM handler,
the flow engine then spends a minute or more reporting the crash to that dead server and ends in a
long connection traceback. Every write of a run is atomic and a resumed run redoes only what was
not finished (the same as after a kill -9), so stopping at once loses nothing.

Only `flywheel run` arms this (``stop_at_once``); a flow run of a deployment keeps Prefect's SIGTERM
handling, which its cancellation relies on. A signal the shell made the process ignore (a
background job's SIGINT, nohup's SIGHUP) stays ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_armed = False


def stop_at_once() -> None:
    """Arm the handler for SIGINT and SIGTERM in this process (main thread only)."""
    global _armed
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _stop)
    _armed = True


def rearm() -> None:
    """Inside a flow run, where Prefect has put its own SIGTERM handler in place: put ours back,
    if `flywheel run` armed it. Prefect restores the one it replaced when the flow run ends."""
    if _armed and threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _stop)


def _stop(signum: int, frame) -> None:
    from flywheel.store import LOCKED

    then = f"continue it with: flywheel run --resume {LOCKED[-1]}" if LOCKED else "no run directory was made yet"
    name = "interrupted" if signum == signal.SIGINT else signal.Signals(signum).name
    sys.stderr.write(f"\n{name}: flywheel run stops here; every finished write is kept; {then}\n")
    sys.stderr.flush()
    end_children()
    os._exit(128 + signum)


def end_children(grace_s: float = 3.0) -> None:
    """Terminate this process's children (Prefect's temporary server, training launchers, local
    Dask workers, vLLM servers), then kill the ones still there after ``grace_s``."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for c in children:
        try:
            c.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for c in alive:
        try:
            c.kill()
        except psutil.Error:
            pass
