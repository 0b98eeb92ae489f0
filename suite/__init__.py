"""suite: a containerized reproducibility benchmark suite for distributed PyTorch training."""

__version__ = "0.1.0"
