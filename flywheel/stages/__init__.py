"""The stages of one flywheel iteration, one module each, as plain functions over a run directory.

``select -> battle -> judge`` (per selection round), then ``rate -> curate -> train -> merge ->
evaluate -> allocate``; ``iteration.run_iteration`` runs them in order (the Prefect flow in
``flows/`` and the benchmarks call it, handing it how to run a stage). Each stage returns a
frozen record (``flywheel/run/results.py``) that the store keeps as ``iter-000k/stages/<stage>.json``. A stage
whose result is on disk is done and is not run again; one that was cut short runs again and
skips every record already on disk (battles, judgments, generations). That is what makes
``--resume`` lose nothing and count nothing twice.
"""
