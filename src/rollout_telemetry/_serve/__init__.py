"""The HTTP endpoint (/metrics, /rollouts, /healthz) and service discovery on one hardened stack."""
