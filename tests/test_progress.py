"""Progress: a bar on a terminal, plain log lines (each quarter) when output is not a terminal."""

import io
import logging

from flywheel.ground.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_bar_and_a_pipe_gets_log_lines(caplog):
    tty = Terminal()
    with Progress(10, "battles iter 1", "battles", stream=tty) as bar:
        for _ in range(10):
            bar.update(1)
        assert bar.bar.n == 10 and bar.bar.total == 10
    assert "battles iter 1:" in tty.getvalue() and "%|" in tty.getvalue()  # a tqdm bar, cleared when done
    pipe = io.StringIO()
    with caplog.at_level(logging.INFO, logger="flywheel"):
        with Progress(8, "judgments iter 1", "battles", stream=pipe) as bar:
            for _ in range(8):
                bar.update(1)
    assert pipe.getvalue() == ""  # no bar characters in logs
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"judgments iter 1: {n}/8 battles ({p}%)" for n, p in ((0, 0), (2, 25), (4, 50), (6, 75), (8, 100))]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flywheel"):
        Progress(0, "nothing").update(0)
    assert caplog.records == []
