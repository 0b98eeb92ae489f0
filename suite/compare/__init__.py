"""`suite compare BASELINE CURRENT`: cell-by-cell verdicts between two sets of stored runs, for nightly CI.

    comparison.py      matching cells by id, the environment differences, `compare()` -> Comparison
    check.py           what every check shares: a cell's two sides, a Verdict, the Check base class
    checks.py          status, timing (step time, tokens/s) and memory checks; CHECKS, the list compare runs
    quality_checks.py  convergence gates, final loss, held-out loss and accuracy
    noise.py           how a timing change is judged against run-to-run noise (docs/compare.md)
    output.py          the terminal table and the Markdown summary
    junit.py           JUnit XML, one test case per cell and check

Reads results and the report's cell rows; imports no torch.  publish/ judges every night with `compare()`.
"""
