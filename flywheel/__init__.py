"""A bandit-driven Arena Learning data flywheel. The parts, bottom up: ``ground``, ``maths`` and
``games`` (rules), ``players``, ``judges`` (top-level), ``learning``, ``worlds``, ``arena``,
``stages``, ``flows`` (top-level), ``face``; the import-linter contracts in ``pyproject.toml``
keep each part to the parts below it."""
