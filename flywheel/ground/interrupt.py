"""Ctrl-C (or a SIGTERM) ends `flywheel run` at once, with the command that continues it.

A terminal's Ctrl-C, like `timeout` or a service manager's SIGTERM, reaches the whole process group,
Prefect's temporary server too. Left to Python's KeyboardInterrupt or Prefect's SIGTERM handler,
the flow engine then spends a minute or more reporting the crash to that dead server and ends in a
long connection traceback. Every write of a run is atomic and a resumed run redoes only what was
not finished (the same as after a kill -9), so stopping at once loses nothing.

Only `flywheel run` arms this (``stop_at_once``); a flow run of a deployment keeps Prefect's SIGTERM
handling, which its cancellation relies on. A signal the shell made the process ignore (a
background job's SIGINT) stays ignored, inside the flow run too.

A `flywheel run` killed alone (``kill -9 PID``, the kernel's OOM killer) runs no handler at all, and
its children would live on: Prefect's temporary server holding its port, memory and database, a
training launcher or a Dask worker. ``watch_children`` starts a small watchdog process
(``python -m flywheel.ground.interrupt WATCH PID``) that notes the run's descendants every
``WATCH_INTERVAL_S`` and, once the run is gone, ends the ones it last saw (a child started in the
run's last moment may escape it). Killing the whole process group kills the watchdog too, with
everything else.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

WATCH_INTERVAL_S = 0.5

# signal -> what `flywheel run` wants for it: _stop, or SIG_IGN where it found the signal ignored
_wanted: dict[int, Any] = {}


def stop_at_once() -> None:
    """Arm the handler for SIGINT and SIGTERM in this process (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            _wanted[sig] = signal.SIG_IGN if signal.getsignal(sig) is signal.SIG_IGN else _stop
            signal.signal(sig, _wanted[sig])


def rearm() -> None:
    """Inside a flow run, where Prefect has put its own SIGTERM handler in place (even over an
    ignored SIGTERM): put back what `flywheel run` wants, if it armed. Prefect restores the one it
    replaced when the flow run ends."""
    if signal.SIGTERM in _wanted and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _wanted[signal.SIGTERM])


def _stop(signum: int, frame) -> None:
    from flywheel.ground.store import LOCKED  # lazy: the WATCH process (-m) stays free of pyarrow

    for sig in _wanted:  # a second Ctrl-C while the children end changes nothing
        signal.signal(sig, signal.SIG_IGN)
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
    end(children, grace_s)


def end(children: list, grace_s: float = 3.0) -> None:
    """Terminate ``children`` (psutil processes), then kill the ones still there after ``grace_s``.
    psutil refuses to signal a pid that has since been reused by another process."""
    import psutil

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


def watch_children() -> None:
    """Start the watchdog that ends this process's descendants if it dies without ending them."""
    import subprocess

    subprocess.Popen([sys.executable, "-m", "flywheel.ground.interrupt", "WATCH", str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)


def watch(parent: int) -> None:
    """The watchdog's loop: while ``parent`` lives (it is still this process's parent), note its
    other descendants; then end the ones last seen."""
    import psutil

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a terminal's Ctrl-C ends it quietly; the run ends its children
    me, seen = os.getpid(), []
    while os.getppid() == parent:
        try:
            look = [c for c in psutil.Process(parent).children(recursive=True) if c.pid != me]
        except psutil.Error:
            break
        if os.getppid() != parent:  # it died during the look: its children had moved away, so the look missed them
            break
        seen = look
        time.sleep(WATCH_INTERVAL_S)
    end([c for c in seen if c.is_running()])


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "WATCH":
    watch(int(sys.argv[2]))
