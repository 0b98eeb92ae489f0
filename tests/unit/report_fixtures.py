"""The report/compare tests' fixture factory: suite.testing.results_factory (shared with scripts/report-speed)."""

from suite.testing.results_factory import (BASE_SCENARIO, LAUNCH_S, SETUP, T0, TEARDOWN_S,  # noqa: F401
                                           make_cells, make_manifest, make_record, make_result, write_run)
