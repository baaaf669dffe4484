"""Publishing a run's datasets to the Hugging Face Hub (``flywheel data push``).

One dataset repository per run: every iteration's ``sft`` and ``dpo`` folders (and GRPO's
``rollouts``) as they are on
disk (``data/*.parquet``, their cards and lineage), and a root card whose YAML front matter names
one config per non-empty dataset (``sft-iter1``, ``dpo-iter1``, ...), so that
``load_dataset(repo, "sft-iter1")`` reads it. The token comes from the environment
(``HF_TOKEN``, as huggingface_hub reads it) and is never written anywhere.
"""

from __future__ import annotations

from pathlib import Path

from flywheel.face.dataview import count_rows
from flywheel.ground.cards import hub_card, parquet_config
from flywheel.ground.run_view import RunView


class PushError(RuntimeError):
    """The run cannot be pushed as it is, or the Hub refused it."""


def dataset_folders(view: RunView) -> list[tuple[int, str, Path]]:
    """(iteration, kind, folder) of every curated dataset of the run, in the Parquet layout."""
    found = []
    for k, kind, folder in view.datasets():
        if (folder / "state.json").is_file():
            raise PushError(f"{folder}: written before datasets were Parquet; export it first "
                            f"(flywheel data export {folder} --format parquet)")
        found.append((k, kind, folder))
    if not found:
        raise PushError(f"{view.root}: no datasets to push yet")
    return found


def root_card(run_dir: Path, folders: list[tuple[int, str, Path]]) -> str:
    configs = [parquet_config(f"{kind}-iter{k}", f"{folder.relative_to(run_dir)}/data/*.parquet")
               for k, kind, folder in folders if count_rows(folder)]
    listing = "".join(f"| {k} | {kind} | {count_rows(folder)} | `{folder.relative_to(run_dir)}` |\n" for k, kind, folder in folders)
    text = (f"# Arena Learning flywheel datasets: run {run_dir.name}\n\n"
            "Each iteration's SFT examples and DPO pairs, curated from judged battles; every folder keeps its own "
            "card and lineage (`manifest.json`). Datasets without rows have no config.\n\n"
            "| iteration | dataset | rows | folder |\n|---|---|---|---|\n" + listing)
    return hub_card("dataset", text, license="other", task_categories=["text-generation"],
                    tags=["trl", "sft", "dpo", "arena-learning", "flywheel"], configs=configs or None)


def push_operations(view: RunView) -> list:
    """The Hub commit that publishes the run's datasets: ``CommitOperationAdd`` for every file."""
    from huggingface_hub import CommitOperationAdd

    folders = dataset_folders(view)
    ops = [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=root_card(view.root, folders).encode())]
    for _, _, folder in folders:
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            ops.append(CommitOperationAdd(path_in_repo=str(f.relative_to(view.root)), path_or_fileobj=str(f)))
    return ops


def push(view: RunView, repo: str, private: bool = False) -> str:
    """Create (or reuse) the dataset repository and commit the run's datasets; the commit's URL."""
    from huggingface_hub import HfApi

    ops = push_operations(view)
    api = HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        info = api.create_commit(repo_id=repo, repo_type="dataset", operations=ops,
                                 commit_message=f"flywheel run {view.root.name}: {len(ops) - 1} files")
    except Exception as e:  # network, authentication, offline mode: one line, the token never shown
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PushError(f"push to {repo} failed: {type(e).__name__}: {first}") from None
    return str(info.commit_url)
