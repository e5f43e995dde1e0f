"""The training program: mechanism builders, the loop on tff.program, plots."""
