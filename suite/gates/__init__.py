"""Convergence gates applied to finished cells: the `convergence:` block a scenario declares
(suite/scenario/convergence.py; its references are checked at expansion, suite/scenario/references.py).

    loss.py     finite, min_loss_drop, max_final_loss, and `match` (loss and gradient-norm curves against the
                reference cell's)
    quality.py  held-out gates: max_eval_loss, min_accuracy, time to a quality target
    band.py     the seed band (MLPerf-style reference convergence points); its numbers also draw the report's
                band figures (suite/report/bands.py)

Pure functions over Cells and CellResults: the runner applies them, the report and compare read their verdicts.
"""
