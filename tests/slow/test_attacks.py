"""The endpoint under attack from another process on 127.0.0.1: what no attack may do.

Each attack of ``benchmarks/attacks.py`` (the one driver, imported here) runs in a child process against a
server in this process: ``/metrics``, or service discovery's ``/targets`` for the ``targets-`` attacks, while
a thread of this process records a rollout every 2 ms. No attack may keep an authorised scraper out (at least
four of five scrapes answered within ``PATIENCE``, a restarted scraper verified), hold a thread per
connection, lose or invent a count, or leave descriptors, threads or memory behind (back to their baseline,
RSS within 100 MB of it, within 10 s). How fast the scrapes answer, against the same scrapes unattacked in
the same run, is the benchmark's figure (``benchmarks/attacks.py``: within 1 s on an idle machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.attacks import ATTACKS, MB, run_attack

PATIENCE = 10.0
"""Seconds a scrape may take: Prometheus' default scrape timeout, past which it counts a target down. Wide
for any machine that runs the suite (an idle one answers within 1 s), and a scraper kept out is out longer."""

# Not ``alone``: what an attack must not do does not depend on the tests beside it (PATIENCE is wide, the
# descriptors, threads and memory are this process's), and run in a row with the machine held, the attacks
# took three minutes in which every other worker waited.


@pytest.mark.parametrize("name", list(ATTACKS))
def test_no_attack_keeps_a_scraper_out_or_loses_a_count(name: str, tmp_path: Path) -> None:
    """Four of five scrapes during the attack answer within Prometheus' scrape timeout, every outcome
    recorded meanwhile is counted, no connection holds a thread, and descriptors, threads and memory
    recover."""
    attack = ATTACKS[name]
    outcome = run_attack(attack, tmp_path, scrapes=5, settle=10, early=True, patience=PATIENCE)
    report = outcome.line(name)
    if not attack.verified:
        assert outcome.verified_after is not None, report
    assert outcome.held_within(PATIENCE) >= 4, report
    recorded, counted = outcome.recorded
    assert counted == recorded, report
    assert outcome.threads_during == outcome.descriptors[0][1], report  # the threads there were before
    assert outcome.recovered is not None, report
    before, _, after = outcome.rss
    assert after - before < 100 * MB, report
