"""Hydra launchers for infinipotv sweeps: submitit's Slurm and local launchers, with every job checked first.

Lives under the ``hydra_plugins`` namespace package because Hydra instantiates launchers only from there. Selected by
``conf/hydra/launcher/slurm.yaml`` and ``local.yaml`` (``hydra/launcher=slurm``, or a ``+cluster=NAME`` profile).
"""
