"""``python -m flywheel.cli``: the ``flywheel`` command (it lives in ``flywheel.face.cli``)."""

from flywheel.face.cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
