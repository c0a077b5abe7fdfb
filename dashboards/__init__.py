"""Dashboards as code: the generator of rollout-progress.json and its PromQL (a development tool)."""
