"""One target's training, as launched by ``accelerate launch -m flywheel.stages.train_worker RUN_DIR K
TARGET STEPS`` (``train.launcher: accelerate``). Every process runs the same TRL code path; the
main process saves the version and writes ``iter-k/stages/train-<target>.json``."""

from __future__ import annotations

import sys

from flywheel.ground.atomic import atomic_write_json
from flywheel.learning.training import is_main_process
from flywheel.run.context import worker_context
from flywheel.stages.train import train_target


def main(argv: list[str]) -> None:
    run_dir, k, target, steps = argv[0], int(argv[1]), argv[2], int(argv[3])
    ctx = worker_context(run_dir)
    result = train_target(ctx, k, target, steps)
    if is_main_process():
        atomic_write_json(ctx.store.stage_path(k, f"train-{target}"), result.to_json())


if __name__ == "__main__":
    main(sys.argv[1:])
