"""What a Ray rank tells the driver besides its files: the `suite_event` values of its `ray.train.report`
metrics, and the exception that carries a failed rank's record to the driver's callback.

Shared by the training function (train_fn.py, which reports them) and the driver's callback (rank_files.py,
which turns them into event lines); imports nothing, so neither needs Ray to name them.
"""

from __future__ import annotations

START, CHECKPOINT, DONE = "start", "checkpoint", "done"  # values of the `suite_event` metric


class RankFailed(RuntimeError):
    """A rank's run failed; carries its RankRecord (JSON) to the driver's callback."""

    def __init__(self, record_json: str, summary: str):
        super().__init__(summary)
        self.record_json = record_json

    def __reduce__(self):  # pickled across processes by Ray: keep the record
        return (RankFailed, (self.record_json, str(self)))
