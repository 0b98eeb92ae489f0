"""suite.device.resolve_device: what a cell's device setting means for a GPU count."""

from __future__ import annotations

import pytest

from suite.device import resolve_device


def test_auto_follows_the_gpu_count():
    assert resolve_device("auto", 0) == "cpu"
    assert resolve_device("auto", 1) == "cuda" and resolve_device("auto", 8) == "cuda"


def test_explicit_devices_are_taken_as_asked():
    assert resolve_device("cuda", 0) == "cuda"  # whether it can run is the runner's / worker's to say
    assert resolve_device("cpu", 8) == "cpu"


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="expected auto, cuda or cpu"):
        resolve_device("tpu", 1)
