"""build_model(shape, seed): the torch module for a model shape, with weights that depend only on the seed.

Every rank of every strategy calls this with the cell's seed and gets bit-identical weights, so a 2-rank
ZeRO-3 run and a 1-rank reference start from the same point and their loss curves can be compared.

How: the weights are drawn (GPT/Llama: in their `init_weights()`; ViT: in torchvision's constructor) between
`torch.random.fork_rng` and `torch.manual_seed(seed)`.  The global RNG is thus seeded for construction only and restored afterwards, so
building a model never disturbs anyone else's random stream.  The weights are drawn from the RNG of the
device they are created on (the current default device): the same seed gives identical weights on every CPU
rank, and identical weights on every CUDA rank, but CPU and CUDA streams differ.

Big models: call it inside `with torch.device("meta"):` to get the module structure with no storage (how
the tests count llama3-70b's parameters).  To train such a model, materialize it with `to_empty(device=...)`
and call `init_weights(model, seed)` (GPT and Llama only; it also recomputes Llama's rotary buffer).

Nothing here (or in the models) imports torch.distributed.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from suite.models.own import AnyShape, HfShape, PythonShape
from suite.models.presets import GptShape, LlamaShape, VitShape


@contextlib.contextmanager
def seeded(seed: int):
    """Run the body with the global RNGs of the current default device seeded; restore them afterwards."""
    device = torch.get_default_device()
    devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)  # seeds the CPU generator and (if initialized) every CUDA generator
        yield


def build_model(shape: AnyShape, seed: int) -> nn.Module:
    """The model for `shape` on the current default device, initialized from `seed` alone."""
    with seeded(seed):  # also keeps the constructors' default nn.Linear init off the global RNG
        model = _construct(shape)
        if hasattr(model, "init_weights"):
            # GPT and Llama (and a factory's module that has it) draw their weights in init_weights() alone,
            # from a freshly seeded RNG, so
            # build_model and a later init_weights(model, seed) after to_empty() agree exactly.
            torch.manual_seed(seed)
            model.init_weights()
    return model


def _construct(shape: AnyShape) -> nn.Module:
    if isinstance(shape, GptShape):
        from suite.models.gpt import GPT

        return GPT(shape)
    if isinstance(shape, LlamaShape):
        from suite.models.llama import Llama

        return Llama(shape)
    if isinstance(shape, VitShape):
        from suite.models.vit import ViT

        return ViT(shape)  # torchvision initializes inside its constructor, from the seeded RNG
    if isinstance(shape, HfShape):
        from suite.models.hf import HfCausalLM

        return _as_probed(shape, HfCausalLM(shape), shape.probed)  # transformers initializes, from the seeded RNG
    if isinstance(shape, PythonShape):
        from suite.models.factory import construct, probe_digest

        digest = probe_digest(shape.factory)
        if shape.probed and digest != shape.probed.get("source_digest"):
            raise RuntimeError(f"factory {shape.factory}: its source file here (digest {digest}) is not the one the "
                               f"scenario was validated with ({shape.probed.get('source_digest')}): another version "
                               "of the code is mounted or installed where this rank runs")
        return _as_probed(shape, construct(shape.factory, shape.args), shape.probed)
    raise TypeError(f"build_model: unknown model shape {type(shape).__name__}; expected one of suite.models.own's")


def _as_probed(shape: AnyShape, model: nn.Module, probed: dict | None) -> nn.Module:
    """The model this rank built is the one the scenario was validated with (same parameter count)."""
    count = sum(p.numel() for p in model.parameters())
    if probed and count != probed.get("parameters"):
        raise RuntimeError(f"model {getattr(shape, 'factory', None) or shape.config}: built with {count} parameters "
                           f"here, validated with {probed.get('parameters')}: not the same model (another version "
                           "of its code or of transformers where this rank runs)")
    return model


def materialize(model: nn.Module, device) -> nn.Module:
    """`model.to_empty(device=device)` keeping shared (tied) parameters shared: to_empty gives every module its
    own new Parameter, which would count a tied head twice (the trace materializes meta builds with this)."""
    users: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                users.setdefault(id(p), []).append((module, name))
    model.to_empty(device=device)
    for (first, name), *others in users.values():
        for module, other in others:
            setattr(module, other, getattr(first, name))
    return model


def init_weights(model: nn.Module, seed: int) -> None:
    """Re-run a GPT/Llama model's initialization from `seed` on the device its parameters live on.

    Gives the same weights as build_model(shape, seed) on that device; used after `to_empty()` on a model that
    was built on the meta device."""
    if not hasattr(model, "init_weights"):
        raise TypeError(f"init_weights: {type(model).__name__} has no init_weights(); build it with build_model instead")
    device = next(model.parameters()).device
    with torch.device(device), seeded(seed):
        model.init_weights()
