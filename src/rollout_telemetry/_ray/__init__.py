"""Rollout workers on a Ray cluster, discovered by Prometheus: ``rollout_telemetry.ray``'s internals.

``cluster``, ``registry_actor`` and ``target`` import Ray (``rollout_telemetry.ray`` checks first that it is
installed); service discovery (``discovery``, ``target_registry``, ``targets``) does not.
"""
