"""What a file given as a run's file holds, told from its name and its first bytes, before it is read.

A run's files are JSON Lines: one JSON object per line. A file that is something else (compressed, binary,
one pretty-printed JSON document, an array, CSV, text) or a run's other file (its materialized inputs, its
failures sidecar, a reward profile) given as the main output would be read as rows that are all rejected, or
worse, as rollouts: it is named here, with what to give instead, before anything is counted.
"""

from __future__ import annotations

import json
from pathlib import Path

from rollout_telemetry._sources.tail import NotRegular, open_regular
from rollout_telemetry.errors import ConfigError

__all__ = ["SIDECAR_SUFFIXES", "check_json_lines", "check_main_file"]

_SNIFF = 1 << 16
"""Bytes of a file's start looked at."""

SIDECAR_SUFFIXES = {
    "_materialized_inputs.jsonl": "the run's materialized inputs (what it was to produce)",
    "_failures.jsonl": "the run's failures sidecar",
    "_reward_profiling.jsonl": "a reward profile (per-task aggregates from Gym's reward profiling)",
}
"""The files NeMo Gym writes beside a run's main output ``<stem>.jsonl``, by the end of their name."""

_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"(\xb5/\xfd": "zstd"}


def check_main_file(path: Path, what: str = "") -> None:
    """Refuse a run's other file given as its main output, naming the main file to give instead.

    Raises:
        ConfigError: the name is that of a materialized inputs file, a failures sidecar or a reward profile.
    """
    for suffix, kind in SIDECAR_SUFFIXES.items():
        if path.name.endswith(suffix) and path.name != suffix:
            main = path.with_name(path.name.removesuffix(suffix) + ".jsonl")
            msg = f"{what}{path} is {kind}, not rollouts: give the run's main output {main}"
            raise ConfigError(msg)


def check_json_lines(path: Path, what: str = "") -> None:
    """Refuse a file whose start shows it is not JSON Lines of objects; an empty or missing file passes.

    Raises:
        ConfigError: the file is compressed, binary, one JSON document or array, or holds no JSON object
            line in its first 64 KiB (CSV, text); or it is not a regular file, or cannot be read.
    """
    try:
        with open_regular(path)[0] as file:
            head = file.read(_SNIFF)
    except FileNotFoundError:
        return
    except NotRegular:
        msg = f"{what}{path} is not a regular file (a FIFO or a device): give the run's <stem>.jsonl"
        raise ConfigError(msg) from None
    except OSError as exc:
        msg = f"{what}{path} cannot be read: {exc.strerror or exc}"
        raise ConfigError(msg) from None
    start = head.lstrip()
    if not start:
        return
    for magic, name in _COMPRESSED.items():
        if head.startswith(magic):
            msg = f"{what}{path} is {name}-compressed: decompress it first (the rows are JSON Lines)"
            raise ConfigError(msg)
    if b"\0" in head or not _is_text(head):
        msg = f"{what}{path} is a binary file, not JSON Lines (one JSON object per line)"
        raise ConfigError(msg)
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    if any(line.startswith(b"{") and line != b"{" for line in lines):
        _check_not_inputs(path, what, lines)
        return  # a line that starts an object on its own: JSON Lines (a hostile line or two are rejected)
    first = lines[0]
    if first.startswith(b"["):
        msg = f"{what}{path} holds a JSON array, not JSON Lines: write one rollout object per line"
    elif first == b"{":
        msg = f"{what}{path} holds pretty-printed JSON, not JSON Lines: one rollout object per line (jq -c .)"
    else:
        looks = " (it looks like CSV)" if b"," in first else ""
        shown = first[:40].decode("utf-8", "replace")
        msg = f"{what}{path} is not JSON Lines{looks}: no line is a JSON object; line 1 is {shown!r}"
    raise ConfigError(msg)


_OUTPUT_KEYS = frozenset({"reward", "response", "_ng_result_type"})
"""Keys a row of a run's output (or its failures sidecar) has and a row of its inputs does not."""


def _check_not_inputs(path: Path, what: str, lines: list[bytes]) -> None:
    """Refuse NeMo Gym's input given as a run's output: rows of ``responses_create_params`` with no output
    key in the whole lines of the file's start (the tasks given to ``gym eval run --input``, or a run's
    materialized inputs under another name).

    Raises:
        ConfigError: naming the file to give instead.
    """
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the line the sniffed length cut, or a bad line: rejected as such when read
        if isinstance(row, dict):
            rows.append(row)
    if not rows or any(
        _OUTPUT_KEYS & row.keys() or any(key.startswith("_ng_failure") for key in row) for row in rows
    ):
        return
    if not any("responses_create_params" in row for row in rows):
        return
    kind = (
        "a run's materialized inputs" if any("_ng_task_index" in row for row in rows) else "NeMo Gym's tasks"
    )
    msg = (
        f"{what}{path} holds {kind} (requests, no reward): give the run's output, the --output of "
        "`gym eval run` (out/rollouts.jsonl, say)"
    )
    raise ConfigError(msg)


def _is_text(head: bytes) -> bool:
    """Whether ``head`` is UTF-8, but for a character the sniffed length cut in two."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True
