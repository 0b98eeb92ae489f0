"""What a cell trains on and is evaluated on: the `data:` kinds and the `eval:` block of a scenario file.

Every data kind has a held-out split that training never draws from:
- synthetic: a separate stream of the same generator, seeded with a tag no training step uses (the same
  task, other samples);
- text: the last EVAL_FRACTION of the corpus (training windows lie wholly before it);
- cifar10: the test batch (10,000 images of the real data; the generated test batch of a tiny folder).
Evaluation reads the model and never changes training: a cell with `eval:` trains exactly as without it, so
`eval` is not part of the cell id (cells.py).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from suite.scenario.fields import Strict

EVAL_FRACTION = 0.1  # of a text corpus, held out at its end


class SyntheticData(Strict):
    """A learnable synthetic task: tokens from a fixed random Markov chain (text models) or class patterns (vit)."""

    kind: Literal["synthetic"] = Field(description="Synthetic data, generated from the cell's seed.")


class TextData(Strict):
    """Byte-level language modelling over text files."""

    kind: Literal["text"] = Field(description="Byte-level text; vocab must be >= 256.")
    path: str | None = Field(
        None, description="File or folder of text files; default: the Python standard library's sources. The "
        "last tenth is held out for evaluation (training never reads it)."
    )


class Cifar10Data(Strict):
    """torchvision's CIFAR-10 with the seed's transforms (vit models only)."""

    kind: Literal["cifar10"] = Field(description="CIFAR-10 through torchvision.datasets.CIFAR10.")
    root: str = Field("data/cifar10", description="Folder holding cifar-10-batches-py/.")
    download: bool = Field(False, description="Download when missing (needs internet; off by default).")


Data = Annotated[Union[SyntheticData, TextData, Cifar10Data], Field(discriminator="kind")]


class Eval(Strict):
    """Held-out evaluation while training: loss (all models), accuracy (vit), perplexity (language models).

    It runs between optimizer steps, never inside a timed step, on the model as the strategy holds it (sharded
    strategies gather what forward needs); each rank evaluates its slice and the sums are reduced over ranks.
    """

    every_steps: int | None = Field(
        None, gt=0, le=1_000_000_000, description="Evaluate after every this-many optimizer steps (none: only "
        "at the end)."
    )
    batches: int = Field(
        4, gt=0, le=100_000, description="Held-out global batches per evaluation (global_batch_size samples each, "
        "split over the ranks as training batches are)."
    )
    at_end: bool = Field(True, description="Also evaluate after the last step (unless every_steps just did).")

    def points(self, steps: int) -> list[int]:
        """After how many completed optimizer steps evaluation runs, ascending (each once)."""
        every = set(range(self.every_steps, steps + 1, self.every_steps)) if self.every_steps else set()
        return sorted(every | ({steps} if self.at_end else set()))

    @model_validator(mode="after")
    def _something_to_do(self) -> "Eval":
        if self.every_steps is None and not self.at_end:
            raise ValueError("eval: with neither every_steps nor at_end it would never run; set one")
        return self


class Target(Strict):
    """A quality target on the held-out data (MLPerf's headline: the time to reach it)."""

    metric: Literal["eval_loss", "accuracy", "perplexity"] = Field(
        description="eval_loss / perplexity: reached at or below value; accuracy: at or above it.")
    value: float = Field(description="The target, e.g. accuracy 0.75 (a fraction, not a percentage).")

    def reached(self, loss: float, accuracy: float | None, perplexity: float | None) -> bool:
        got = {"eval_loss": loss, "accuracy": accuracy, "perplexity": perplexity}[self.metric]
        if got is None:
            return False
        return got >= self.value if self.metric == "accuracy" else got <= self.value
