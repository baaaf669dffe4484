"""``flywheel report RUN_DIR --html FILE``: the page is one self-contained HTML file (every
section with its heading, every picture a PNG inside the page, no address outside it); a section
the run has no data for says so in one line; bad input is one error line and exit 2. The page of a
finished run is checked in test_flow.py, on its run."""

from __future__ import annotations

import base64
import io
import struct
from html.parser import HTMLParser
from pathlib import Path

from typer.testing import CliRunner

from flywheel.config.loading import dump_config, load_config
from flywheel.face.cli import app
from flywheel.face.report_page import SECTIONS
from flywheel.ground.atomic import atomic_write_text
from flywheel.ground.records import Battle, Judgment
from flywheel.ground.store import RunStore

PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """What a test needs of the page: each section's heading and text, ``p.empty`` lines and
    pictures, and every address (src, href) and tag it uses."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.headings: dict[str, str] = {}
        self.text: dict[str, str] = {}
        self.empty: dict[str, int] = {}
        self.images: dict[str, list[str]] = {}
        self.addresses: list[str] = []
        self.tags: set[str] = set()
        self._section: str | None = None
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.addresses += [v for k, v in attrs if k in ("src", "href") and v is not None]
        if tag == "section":
            self._section = a["id"]
            self.text[self._section] = ""
        elif self._section and tag == "h2":
            self._in = "h2"
        elif self._section and tag == "p" and a.get("class") == "empty":
            self.empty[self._section] = self.empty.get(self._section, 0) + 1
        elif self._section and tag == "img":
            self.images.setdefault(self._section, []).append(a["src"])

    def handle_endtag(self, tag):
        if tag == "section":
            self._section = None
        if tag == "h2":
            self._in = None

    def handle_data(self, data):
        if self._section and self._in == "h2":
            self.headings[self._section] = self.headings.get(self._section, "") + data
        if self._section:
            self.text[self._section] += data + " "


def read_page(path: Path) -> Page:
    """The page parsed, after the checks every page must pass: every section present with its
    heading, no script, stylesheet link, frame or external address, and every picture a PNG data
    URI that decodes (matplotlib reads it back, at the size its IHDR says)."""
    import matplotlib.image

    page = Page(path.read_text(encoding="utf-8"))
    assert page.headings == SECTIONS
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    assert not [a for a in page.addresses if a.startswith(("http://", "https://", "//"))]
    assert "url(" not in path.read_text(encoding="utf-8")  # no CSS fetch (fonts, backgrounds)
    for src in (s for srcs in page.images.values() for s in srcs):
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.partition(",")[2], validate=True)
        assert png[:8] == PNG and png[12:16] == b"IHDR"
        width, height = struct.unpack(">II", png[16:24])
        assert matplotlib.image.imread(io.BytesIO(png), format="png").shape[:2] == (height, width)
    return page


def report(*args: str):
    return CliRunner().invoke(app, ["report", *args])


def _run_dir(root: Path) -> Path:
    atomic_write_text(RunStore(root).config_path, dump_config(load_config(None, ["run.name=r"])))
    return root


def test_a_run_with_nothing_yet_gets_a_page_whose_sections_each_say_so_in_one_line(tmp_path):
    out = tmp_path / "report.html"
    got = report(str(_run_dir(tmp_path / "run")), "--html", str(out))
    assert got.exit_code == 0, got.output
    page = read_page(out)
    assert page.empty == {sid: 1 for sid in SECTIONS if sid != "run"} and page.images == {}
    assert "none yet (of 4)" in page.text["run"] and "calc, scribe, generalist" in page.text["run"]


def test_eval_battles_without_accuracies_show_win_rates_per_category_and_the_win_matrix(tmp_path):
    """A run directory with judged eval battles and nothing else (no summary, no ratings): the
    categories fall back to each model's win rate per category; the win matrix is drawn."""
    store = RunStore(_run_dir(tmp_path / "run"))
    models = ("student@1", "calc", "scribe")
    battles, judgments = [], []
    for i in range(30):
        a, b = models[i % 3], models[(i + 1) % 3]
        battles.append(Battle(str(i), 1, "eval", f"p{i}", "q", ("add", "rev")[i % 2], 1, None, a, b, "x", "y"))
        judgments.append(Judgment(str(i), "verifier", ("model_a", "model_b", "tie")[i % 3]))
    store.append_battles(battles)
    store.append_judgments(judgments, 1, "eval")
    out = tmp_path / "report.html"
    assert report(str(store.root), "--html", str(out)).exit_code == 0
    page = read_page(out)
    assert set(page.empty) == {"leaderboard", "progress", "arms", "datasets"}  # judge: its verdicts are counted
    assert len(page.images["categories"]) == len(page.images["win-matrix"]) == len(page.images["judge"]) == 1
    assert "win rate" in page.text["categories"] and " add " in page.text["categories"]
    assert " 30 " in page.text["judge"]  # 30 eval judgments


def test_bad_input_is_one_error_line_and_exit_2(tmp_path):
    run = _run_dir(tmp_path / "run")
    cases = {(str(tmp_path), str(tmp_path / "r.html")): f"error: {tmp_path}: not a run directory (no config.yaml)",
             (str(run), str(tmp_path / "no" / "r.html")): f"folder {tmp_path / 'no'} does not exist",
             (str(run), str(tmp_path)): "is a folder; give a file name"}
    for (run_dir, html), message in cases.items():
        got = report(run_dir, "--html", html)
        assert got.exit_code == 2 and got.output.count("\n") == 1 and message in got.output, got.output
    assert report(str(run)).exit_code == 2  # --html is required
    assert not (tmp_path / "r.html").exists()
