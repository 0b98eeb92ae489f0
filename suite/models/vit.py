"""torchvision's VisionTransformer (the seed workload), sized by a `VitShape`, with suite's model interface.

The wrapper changes nothing about the mathematics; it only adds what every suite model offers:
- `forward(images, labels) -> loss`: mean cross-entropy of the classifier's logits (computed in fp32);
  `forward(images)` -> the logits (evaluation);
- `.blocks`: the encoder blocks as a ModuleList, for per-block sharding and checkpointing.

torchvision keeps the blocks in `encoder.layers`, an nn.Sequential.  We swap it for `Blocks`, a ModuleList
holding the very same block modules that can still be called like the Sequential was, so torchvision's own
`Encoder.forward` runs unchanged, and `model.blocks` *is* `model.vit.encoder.layers` (a property, not a second
registration: the parameters appear once, under `vit.encoder.layers.<i>`).  Replacing `model.blocks[i]`
(e.g. with a checkpoint wrapper) therefore changes what the forward runs.

Weights come from torchvision's own initialization, drawn from the global RNG that build_model seeds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import VisionTransformer

from suite.models.presets import VitShape


class Blocks(nn.ModuleList):
    """A ModuleList that runs its modules in order when called (a drop-in for the nn.Sequential it replaces)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self:
            x = block(x)
        return x


class ViT(nn.Module):
    """forward(images (b, 3, s, s), labels (b,)) -> mean cross-entropy; logits(images) -> (b, num_classes)."""

    def __init__(self, shape: VitShape):
        super().__init__()
        self.shape = shape
        self.vit = VisionTransformer(
            image_size=shape.image_size,
            patch_size=shape.patch_size,
            num_layers=shape.layers,
            num_heads=shape.heads,
            hidden_dim=shape.hidden,
            mlp_dim=shape.mlp,
            num_classes=shape.num_classes,
        )
        self.vit.encoder.layers = Blocks(list(self.vit.encoder.layers))

    @property
    def blocks(self) -> Blocks:
        return self.vit.encoder.layers

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.vit(images)

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.vit(images)
        if labels is None:  # evaluation (see gpt.py)
            return logits
        return F.cross_entropy(logits.float(), labels)
