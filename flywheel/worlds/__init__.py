"""The worlds battles are played in: the task suite, prompt pools, the tiny and real models, the
games' start positions, and the roster of players (``world.Roster``)."""
