"""Kueue's scheduler tests replayed on Klique and on Slurm: the parts that ``bench/kueue_replay.py``
puts together (see its docstring for the shapes, the estate and what a run reports)."""
