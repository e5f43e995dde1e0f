"""Learning-process builders on tff.learning templates (client work, round schedules, masks)."""
