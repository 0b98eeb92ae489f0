"""Reports, comparisons and exports over stored results (pure functions over files; torch is never imported).

suite.results.reader reads run folders; axes.py names the axes; tables.py and pivots.py arrange cells into
rows; markdown.py, html.py and plots.py render them (render.py is `suite report`); stats.py, checks.py and
compare.py are `suite compare`, junit.py its CI output; export.py writes other tools' formats (`suite export`).
"""
