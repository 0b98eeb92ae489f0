"""Running scenarios: run.py (the loop over cells), cell.py (one cell: launch, status, result), aggregate.py
(numbers from rank records), gates.py (convergence gates), progress.py (what the terminal shows)."""
