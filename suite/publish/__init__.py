"""`suite publish`: stored runs -> a static results site (plain files; opens from disk or any static host).

The flow, one module per step:
- `state.py`: the site's memory, `index.json`: every run ever published (its manifest and a slim copy of its
  cell results), keyed by a digest of the manifest.  Publishing reads only run folders it has not seen (or
  whose cells changed), so a nightly job can publish one night into last night's site.
- `series.py`: which numbers may sit together.  Runs are grouped by what makes numbers comparable (device
  kind and suite's major version: a *group*), and within a group by where they ran (host and image: a
  *machine*).  Each run of a machine is judged by `suite compare` against the runs before it (its history):
  the same verdicts, noise bands and thresholds as compare, never a second rule.
- `trend.py`: one SVG figure per cell and group (step time, tokens/s, MFU, peak memory, final loss over
  time), noise band shaded, regressions ringed in red, every point a link to its run's page.
- `pages.py`: the HTML of the index, scenario, cell and run pages; `command.py`: the command itself, which
  re-renders only pages whose data changed.
"""
