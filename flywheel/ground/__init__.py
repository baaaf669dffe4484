"""The ground floor: typed records, the run store (the only owner of paths in a run directory),
chat rendering, progress, plain-text tables and Ctrl-C handling. Of the other parts of the
flywheel it imports only the config (``flywheel.config``)."""
