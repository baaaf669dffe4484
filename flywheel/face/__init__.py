"""The face: the ``flywheel`` command, its read-only queries, checks, plots, exports and the hub
push. It asks queries of the store and the maths; it runs no stage by hand."""
