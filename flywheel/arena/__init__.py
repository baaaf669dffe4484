"""The arena: battles played and judged a batch at a time (``battles``), choosing which battles
to play (``selection``), games played move by move (``games``) and evaluation rules."""
