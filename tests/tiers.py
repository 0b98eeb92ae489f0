"""Which cases of a parametrized product the default tier runs (the rest are marked `long`: tests/conftest.py).

`covering(cases, keep)` keeps the cases at the indices `keep` in the default tier and marks the others `long`, so
`scripts/test` (CI) runs a covering slice and `scripts/test-long` the whole product, with the same ids either way.
"""

from __future__ import annotations

import pytest


def covering(cases: list, keep: set[int] | list[int], ids=None) -> list:
    """`cases` as pytest params: those at the indices in `keep` plain, the others marked `long`."""
    keep = set(keep)
    out_of_range = sorted(i for i in keep if not 0 <= i < len(cases))
    if out_of_range:
        raise IndexError(f"covering: indices {out_of_range} are outside the {len(cases)} cases")
    params = []
    for i, case in enumerate(cases):
        values = case if isinstance(case, tuple) else (case,)
        marks = () if i in keep else (pytest.mark.long,)
        params.append(pytest.param(*values, marks=marks, id=None if ids is None else ids[i]))
    return params
