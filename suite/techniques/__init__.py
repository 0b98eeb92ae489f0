"""Techniques applied to a plain model or training step, independent of the strategy: activation
checkpointing, torch.compile, mixed precision.  suite/strategies/__init__.py applies them in one order."""
