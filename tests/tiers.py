"""Which cases of a parametrized product the default tier runs (the rest are marked `long`: tests/conftest.py).

`covering(cases, keep)` keeps the cases at the indices `keep` in the default tier and marks the others `long`, so
`scripts/test` (CI) runs a covering slice and `scripts/test-long` the whole product, with the same ids either way
(a case's values joined by "-").
"""

from __future__ import annotations

import pytest


def covering(cases: list, keep: set[int] | list[int]) -> list:
    """`cases` as pytest params, each with its values joined by "-" as its id: those at the indices in `keep`
    plain, the others marked `long`."""
    keep = set(keep)
    out_of_range = sorted(i for i in keep if not 0 <= i < len(cases))
    if out_of_range:
        raise IndexError(f"covering: indices {out_of_range} are outside the {len(cases)} cases")
    params = []
    for i, case in enumerate(cases):
        values = case if isinstance(case, tuple) else (case,)
        marks = () if i in keep else (pytest.mark.long,)
        params.append(pytest.param(*values, marks=marks, id="-".join(map(str, values))))
    return params
