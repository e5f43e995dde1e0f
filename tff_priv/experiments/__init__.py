"""The papers' experiments as grids of training runs: settings, tables, plots.

One module per paper. Each turns its settings into labelled
`tff_priv.program.training.RunConfig`s, which `tff_priv.program.grid.run`
runs (resumably, each in its own run directory, charged like any run), and
reads the runs back into its tables and plots. The scripts in scripts/ only
parse flags and call these.
"""
