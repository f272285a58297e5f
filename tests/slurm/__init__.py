"""Sweeps: the check before submission (no cluster needed) and sweeps on a real single-node Slurm."""
