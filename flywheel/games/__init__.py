"""The games world (``world.kind: games``): symmetric two-player games played move by move.

A battle is one game from a start position; the rules are the judge (``judge.kind: game``); the
winner's moves become SFT data and (winning move, losing move) pairs in the same position DPO
pairs. ``rules`` holds the games and their text form, ``referee`` replays and decides a
recorded game, ``play`` plays games between players, ``reference`` has the random mover and the
minimax player, ``pools`` the start positions, ``curation`` the datasets.
"""
