#!/usr/bin/env bash
# The GPU check, for a lent GPU machine that reaches no package registry. At most 9 minutes and a
# half (on one H200, 2026-12-01: 27 s to install, 70 s of tests on 6 workers, 46 s of run, 184 s
# of benchmark; 335 s in all):
#   1. the tests whose code takes another path on a GPU (precision, device placement, training,
#      the on-policy methods, RL, the reward model, the gap mix and spread, the local and served players);
#   2. a short flywheel run with every local player and the training on device auto (the GPU);
#   3. python -m benchmarks.gpu: a model of SmolLM2-135M's shape answers and trains on cpu and cuda.
# Python: $PY, else .venv/bin/python where it sees a GPU, else python3. Packages the machine lacks
# travel as wheels in .whl/ (made here by `benchmarks/gpu_wheels.sh`) and install without a registry.
# Everything it prints also goes to $OUT (default: gpu-check/).
set -uo pipefail
cd "$(dirname "$0")/.."
export PREFECT_HOME=$PWD/.prefect-gpu HF_HOME=$PWD/.hf PREFECT_SERVER_ANALYTICS_ENABLED=false \
       HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
sees_gpu() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ] && sees_gpu .venv/bin/python; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install --quiet --no-index --find-links .whl --no-deps .whl/*.whl 2>&1 | tail -3
fi
"$PY" -m pip install --quiet --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -3
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
} | tee "$OUT/device.txt"
mkdir -p data/models && for m in data/shipped-models/*/; do   # as make demo does
  [ -e "data/models/$(basename "$m")" ] || cp -R "$m" data/models/; done
status=0
echo "== 1. device tests" | tee -a "$OUT/summary.txt"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider --numprocesses 6 --dist worksteal tests/test_training.py \
  tests/test_onpolicy.py tests/test_rl.py tests/test_rl_conversations.py tests/test_reward_model.py tests/test_mix.py \
  tests/test_models_and_players.py tests/test_served.py 2>&1 | tee "$OUT/tests.txt" | tail -5 \
  | tee -a "$OUT/summary.txt" || status=1
echo "== 2. a flywheel run on device auto" | tee -a "$OUT/summary.txt"
timeout 100 "$PY" -m flywheel.face.cli run --set run.iterations=1 --set select.battles_per_iteration=400 \
  --set train.steps=100 --set run.root="$OUT/runs" --set run.name=gpu 2>&1 | tee "$OUT/run.txt" | tail -25 \
  | tee -a "$OUT/summary.txt" || status=1
echo "== 3. benchmarks.gpu" | tee -a "$OUT/summary.txt"
timeout 200 "$PY" -m benchmarks.gpu --steps 10,40 --prompts 256 --repeats 1 2>&1 | tee "$OUT/gpu.txt" | tail -8 \
  | tee -a "$OUT/summary.txt" || status=1
exit $status
