"""What is computed from snapshots: the catalogue of published series, NeMo Gym's keys, the report."""
