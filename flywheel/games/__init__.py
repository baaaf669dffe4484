"""The rules of the games world (``world.kind: games``): symmetric two-player games played move
by move. ``rules`` holds the games and their text form, ``referee`` replays and decides a
recorded game. Pure logic, so that judges (``judges.game``), players (``players.reference``),
worlds (``worlds.game_pools``), the arena (``arena.games``) and learning
(``learning.game_curation``) can all stand on it without reaching into one another.
"""
