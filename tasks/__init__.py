"""Tasks: data and model per task, as tff.simulation.baselines.BaselineTask."""
