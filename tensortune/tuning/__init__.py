"""The tuning loop: the one round every driver runs (round.py), a single operator's tuning
(tuner.py), and a batch's candidates chosen, exported and imported through the round
(batch.py)."""
