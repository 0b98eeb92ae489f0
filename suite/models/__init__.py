"""Model shapes (presets.py, pure Python) and their torch implementations (gpt.py, llama.py, vit.py).

Nothing in this package imports torch.distributed: models know nothing about how they are trained.
Importing the package itself imports no torch, so the planner can use the shapes on any machine.
"""
