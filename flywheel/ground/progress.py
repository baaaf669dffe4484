"""Progress per stage: a bar on a terminal, plain log lines (every quarter) elsewhere."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("flywheel")


class Progress:
    """``with Progress(total, "battles") as bar: bar.update(n)``."""

    def __init__(self, total: int, desc: str, unit: str = "it", stream=None) -> None:
        self.total, self.desc, self.unit, self.done = total, desc, unit, 0
        stream = stream or sys.stderr
        self.bar = None
        self._logged = -1
        if total and getattr(stream, "isatty", lambda: False)():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=stream, leave=False, dynamic_ncols=True)
        elif total:
            self._log()

    def _log(self) -> None:
        quarter = 4 * self.done // self.total
        if quarter != self._logged:
            self._logged = quarter
            log.info("%s: %d/%d %s (%d%%)", self.desc, self.done, self.total, self.unit, 100 * self.done // self.total)

    def update(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if self.bar is not None:
            self.bar.update(n)
        elif self.total:
            self._log()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def trainer_callback(desc: str, total: int):
    """A transformers TrainerCallback that reports training steps through ``Progress``."""
    from transformers import TrainerCallback

    class _Steps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.progress = Progress(total, desc, "steps")

        def on_step_end(self, args, state, control, **kw):
            self.progress.update(1)

        def on_train_end(self, args, state, control, **kw):
            self.progress.close()

    return _Steps()
