"""What recording a rollout takes beside the account: its lifecycle, spans, stalls, output writes, the runtime
sampler and the rollout log."""
