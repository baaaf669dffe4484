"""The ground floor: typed records, the run store (the only owner of paths in a run directory),
the config, chat rendering, progress, plain-text tables and Ctrl-C handling. It imports no other
part of the flywheel."""
