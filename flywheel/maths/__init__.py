"""Pure numpy: Bradley-Terry ratings and their bootstrap, leaderboards, bandits, active designs.
No player, no store, no config: arrays and records in, arrays and records out.

Named ``maths`` rather than ``math`` so that ``flywheel.math`` never reads as, or is mistaken
by a tool for, the standard library's ``math`` (which these modules import)."""
