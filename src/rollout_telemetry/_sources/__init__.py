"""Reading NeMo Gym's files: the tailer, the Gym row mapping, and a Gym collection run as a child."""
