"""The docs against the code: the generated configuration reference is current, every relative
link points to a file that exists (and, within these pages, to a heading that exists), and every
command the docs show is one the code accepts."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "data" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _reference():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_is_generated_from_the_current_config_models():
    want = _reference().render()
    have = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert have == want, "docs/config.md is stale: run `python -m docs.config_reference` and commit it"


def test_the_configuration_reference_names_every_field_of_every_section():
    from pydantic import BaseModel

    from flywheel.config.tree import FlywheelConfig

    text = _reference().render()
    seen: set[type] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} is missing from the reference"
            for arg in [info.annotation, *getattr(info.annotation, "__args__", ())]:
                for sub in [arg, *getattr(arg, "__args__", ())]:
                    if isinstance(sub, type) and issubclass(sub, BaseModel):
                        walk(sub)

    walk(FlywheelConfig)
    assert len(seen) >= 15


def _strip_code(text: str) -> str:
    """Markdown without fenced code blocks and inline code (links inside them are not links)."""
    return re.sub(r"`[^`]*`", "", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def _links() -> list[tuple[Path, str]]:
    out = []
    for page in PAGES:
        for target in LINK.findall(_strip_code(page.read_text(encoding="utf-8"))):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
                out.append((page, target))
    return out


LINKS = _links()


@pytest.mark.parametrize("page,target", LINKS, ids=[f"{_page_id(p)}: {t}" for p, t in LINKS])
def test_every_relative_link_points_to_a_file_that_exists(page, target):
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{_page_id(page)} links to {target}, which does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{_page_id(page)} links to {target}: no such heading"


def test_the_links_checked_are_many_and_reach_every_page():
    linked = {(page.parent / t.partition("#")[0]).resolve() for page, t in LINKS if t.partition("#")[0]}
    for page in PAGES[1:]:
        assert page.resolve() in linked, f"no page links to {_page_id(page)}"


def _commands() -> list[tuple[Path, str, bool]]:
    """Every `flywheel ...`, `python -m ...` and `make ...` line of the pages' shell blocks, and
    every inline code span that starts with `flywheel` or `python -m ` (inline: True; such a span
    may name a command without its arguments)."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for lang, body in FENCE.findall(text):
            if lang.strip() not in ("", "bash", "sh", "shell"):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if re.match(r"(flywheel|python -m|make) ", line) or line == "flywheel":
                    out.append((page, line, False))
        for span in re.findall(r"`([^`]+)`", FENCE.sub("", text)):
            span = " ".join(span.split()).replace("\\|", "|")
            if re.match(r"(flywheel|python -m) [\w.-]+( |$)", span) and "..." not in span:
                out.append((page, span, True))
    return out


def _flywheel_command():
    """The `flywheel` click command with every callback replaced by a no-op: invoking it parses
    and validates the arguments (commands, options, choices, ranges) and runs nothing."""
    import typer.main

    from flywheel.face.cli import app

    root = typer.main.get_command(app)

    def mute(cmd) -> None:
        cmd.callback = lambda *a, **kw: None
        for sub in getattr(cmd, "commands", {}).values():
            mute(sub)

    mute(root)
    return root


def _words(line: str) -> list[list[str]]:
    """The command's words; a word written as alternatives (`a|b`) gives one variant per
    alternative; an optional part written in brackets (`[--every 200]`) is kept."""
    words = [w.strip("[]") for w in shlex.split(line, comments=True)]
    words = [w for w in words if w and w != "|"]
    split = next((i for i, w in enumerate(words) if "|" in w and not w.startswith("<")), None)
    if split is None:
        return [words]
    return [words[:split] + [alt] + words[split + 1:] for alt in words[split].split("|")]


# What an inline mention may leave out: a command's arguments, an option's value.
PARTIAL = ("Missing parameter", "requires an argument", "NoArgsIsHelpError")


COMMANDS = _commands()


@pytest.mark.parametrize("page,line,inline", COMMANDS,
                         ids=[f"{_page_id(p)}: {line.split('  #')[0].strip()}" for p, line, _ in COMMANDS])
def test_every_command_shown_is_one_the_code_accepts(page, line, inline):
    for words in _words(line):
        _check(words, f"{_page_id(page)}: {line}", inline)


def _check(words: list[str], where: str, inline: bool) -> None:
    if words[0] == "make":
        targets = re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE)
        assert all(w in targets for w in words[1:]), f"{where}: no such make target"
    elif words[0] == "flywheel":
        root = _flywheel_command()
        try:
            root.main(args=words[1:], prog_name="flywheel", standalone_mode=False)
        except SystemExit as e:  # --help
            assert e.code in (0, None), where
        except Exception as e:  # noqa: BLE001 - click's usage errors: no such command or option, a bad value
            problem = f"{type(e).__name__}: {e}"
            if type(e).__name__ != "Exit" and not (inline and any(p in problem for p in PARTIAL)):
                pytest.fail(f"{where}: {problem}")
    else:
        assert words[:2] == ["python", "-m"], where
        module = words[2]
        source = ROOT / (module.replace(".", "/") + ".py")
        assert source.exists(), f"{where}: no module {module}"
        known = source.read_text()
        if "add_world_args" in known:
            known += (ROOT / "benchmarks" / "worlds.py").read_text()
        for w in words[3:]:
            if w.startswith("--"):
                assert f'"{w.split("=")[0]}"' in known, f"{where}: {module} has no option {w}"
        if "--registered" in words[3:-1]:  # a purpose whose worlds moved to tuning is refused
            from benchmarks.worlds import registry

            purpose = words[words.index("--registered") + 1]
            assert purpose in {w.get("purpose") for w in registry()["held_out"]}, \
                f"{where}: no held-out world is registered for {purpose} in benchmarks/worlds.yaml"


def test_commands_are_found_in_the_readme_and_the_docs():
    pages = {page for page, _, _ in COMMANDS}
    assert ROOT / "README.md" in pages and ROOT / "docs" / "benchmarks" / "bandits.md" in pages
    assert len(COMMANDS) > 50


def test_no_docs_page_is_over_600_lines():
    long = {_page_id(p): n for p in PAGES if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"pages over 600 lines (split them by topic): {long}"
