"""hpc_refer: MPI-parallel off-policy deep RL with Remember-and-Forget Experience Replay."""

__version__ = "0.1.0"
