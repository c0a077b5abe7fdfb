"""Label values: what a name becomes before it is a Prometheus label (cut, valid UTF-8)."""

from __future__ import annotations

__all__ = ["MAX_LABEL_LENGTH", "label_value"]

MAX_LABEL_LENGTH = 128
"""Label values (agent names, failure kinds) longer than this are truncated before they become labels."""


def label_value(value: str) -> str:
    """Return ``value`` made safe to be a label value: at most ``MAX_LABEL_LENGTH`` characters, valid UTF-8.

    prometheus_client escapes quotes, backslashes and newlines itself; what it cannot write is a lone
    surrogate, which would fail the whole scrape, so those become ``?``.
    """
    if len(value) > MAX_LABEL_LENGTH:
        value = value[:MAX_LABEL_LENGTH]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value
