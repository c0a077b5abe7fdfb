"""NeMo Gym's rollout rows: the few fields telemetry reads, decoded, and what they say of a rollout.

Rows carry large fields (``response``, ``responses_create_params``) that telemetry never needs, so each
line is decoded with msgspec against a schema of the few fields read: the big ones are skipped while
parsing instead of being built into Python objects and thrown away. A line that is not a row raises a
``Rejection`` naming the reason.

A field that is read is built whole, and a JSON array or object costs far more as Python objects than as
text: a row of tens of MiB whose ``reward`` is an array of empty arrays would become gigabytes. So in a line
longer than
``MAX_FIELD`` (only such a line can hold such a field) the fields are first found unparsed, and a read field
longer than ``MAX_FIELD`` that is an array or an object is read as an empty one of its kind: as wrong a
value as it was (a reward that is no number, no usable ``ng_perf``), at no cost.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from rollout_telemetry import failure_kinds
from rollout_telemetry._contract.failure_where import Where, failure_where
from rollout_telemetry._contract.identity import check_attempt, check_identity
from rollout_telemetry._contract.outcome import Classified, Disposition, absent
from rollout_telemetry.errors import OutcomeError, Rejection

__all__ = [
    "Row",
    "decode_row",
    "failure_outcome",
    "gym_rollout_id",
    "recover_row",
    "row_agent",
    "row_attempt",
    "row_identity",
    "row_latency",
    "row_perf_counts",
    "row_run_id",
]

MAX_FIELD = 64 * 1024
"""Bytes of a read field's JSON past which an array or an object is not built (``decode_row``)."""
_MAX_RECOVERY = 1024
"""Places a torn line is tried at for the whole row after it (see ``recover_row``)."""


class _ModelResponse(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields read from a row's ``response`` (the Responses API object): its ``output`` and the rest are
    skipped unparsed. ``outcome.check_generation`` checks them, as for any verify response."""

    status: Any = None
    incomplete_details: Any = None
    usage: Any = None


_Scalar = str | int | float | bool | None
_Response = _ModelResponse | _Scalar | list[Any]


class Row(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields telemetry reads from any of the three files; everything else is skipped unparsed.

    ``gc=False`` (here and on ``_ModelResponse``): a decoded row cannot hold a reference cycle, so the cyclic
    garbage collector need not track it. Tracked, the rows' allocations set off collections that walk the
    coverage account's every rollout, a cost that grows with the run.
    """

    reward: Any = None
    mask_sample: Any = None
    failure_kind: Any = None
    failure_reason: Any = None
    # Not a Responses API object (a string, say): the row is still read, with no usage or truncation.
    response: _Response = None
    task_index: Any = msgspec.field(default=None, name="_ng_task_index")
    rollout_index: Any = msgspec.field(default=None, name="_ng_rollout_index")
    attempt_index: Any = msgspec.field(default=None, name="_ng_attempt_index")
    environment_server: Any = msgspec.field(default=None, name="_ng_environment_server")
    agent_ref: Any = None
    failure_class: Any = msgspec.field(default=None, name="_ng_failure_class")
    failure_terminal: Any = msgspec.field(default=None, name="_ng_failure_terminal")
    failure_message: Any = msgspec.field(default=None, name="_ng_failure_message")
    failure_record: Any = msgspec.field(default=None, name="_ng_failure_record")
    failure_stage: Any = msgspec.field(default=None, name="_ng_failure_stage")
    judge_error: Any = msgspec.field(default=None, name="_ng_failure_judge_error")
    error_message: Any = None
    error_class: Any = None
    omitted: Any = msgspec.field(default=None, name="_ng_omitted")
    # Read for a followed rollout's span only: Gym's correlation id and its small per-rollout summary.
    rollout_id: Any = msgspec.field(default=None, name="_ng_rollout_id")
    # NeMo Gym's next release (PR #3302) stamps every row with the run it belongs to.
    run_id: Any = msgspec.field(default=None, name="_ng_run_id")
    perf: Any = msgspec.field(default=None, name="ng_perf")
    trajectory: Any = msgspec.field(default=None, name="ng_trajectory")  # its health: _contract.health


_DECODER = msgspec.json.Decoder(Row)


def _unparsed(name: str, struct: type[msgspec.Struct], response: Any = msgspec.Raw) -> type[msgspec.Struct]:
    """``struct`` with every field left as its JSON text (``msgspec.Raw``): found, not built; its
    ``response`` (if it has one) typed ``response``."""
    fields = [
        (
            field.name,
            response if field.name == "response" else msgspec.Raw,
            msgspec.field(default=None, name=field.encode_name),
        )
        for field in msgspec.structs.fields(struct)
    ]
    return msgspec.defstruct(name, fields, forbid_unknown_fields=False, gc=False)


_UnparsedResponse = _unparsed("_UnparsedResponse", _ModelResponse)
# A row's response found in the same pass as its other fields, when it is not an array (an array of any
# length as Python objects costs what this avoids: such a row is read again with the response unparsed).
_UNPARSED_ROW = msgspec.json.Decoder(_unparsed("_UnparsedRow", Row, _UnparsedResponse | _Scalar))
_UNPARSED_ROW_OF_ARRAY = msgspec.json.Decoder(_unparsed("_UnparsedRowOfArray", Row))
_UNPARSED_RESPONSE = msgspec.json.Decoder(_UnparsedResponse)
_EMPTY = {ord("["): list, ord("{"): dict}


def _bounded(raw: msgspec.Raw | None) -> Any:
    """A field's value from its JSON text: an array or an object longer than ``MAX_FIELD``, empty."""
    if raw is None:
        return None
    text = memoryview(raw)
    if len(text) > MAX_FIELD and (empty := _EMPTY.get(text[0])) is not None:
        return empty()
    return msgspec.json.decode(text)


def _model(unparsed: msgspec.Struct) -> _ModelResponse:
    """The model response whose fields were found unparsed, each ``_bounded``."""
    return _ModelResponse(
        **{name: _bounded(getattr(unparsed, name)) for name in _ModelResponse.__struct_fields__}
    )


def _decode(line: bytes | memoryview) -> Row:
    """The row of a line: in one pass, or field by field past ``MAX_FIELD`` (``_bounded_row``)."""
    return _DECODER.decode(line) if len(line) <= MAX_FIELD else _bounded_row(line)


def _bounded_row(line: bytes | memoryview) -> Row:
    """The row of a line longer than ``MAX_FIELD``, each read field ``_bounded``."""
    try:
        unparsed = _UNPARSED_ROW.decode(line)
    except msgspec.ValidationError:  # the response is an array
        unparsed = _UNPARSED_ROW_OF_ARRAY.decode(line)
    fields = {name: getattr(unparsed, name) for name in Row.__struct_fields__}
    response = fields.pop("response")
    if isinstance(response, _UnparsedResponse):
        response = _model(response)
    elif isinstance(response, msgspec.Raw):  # an array, or a later repeat of the key (the last one counts)
        response = (
            _model(_UNPARSED_RESPONSE.decode(response))
            if memoryview(response)[0] == ord("{")
            else _bounded(response)
        )
    return Row(response=response, **{name: _bounded(value) for name, value in fields.items()})


NO_RESULT_CLASSES = frozenset(
    {
        failure_kinds.AGENT_REQUEST_FAILED,
        failure_kinds.AGENT_RUN_ERROR,
        failure_kinds.ENVIRONMENT_SERVER_FAILED,
    }
)
"""Failure classes whose rows carry no result: a reward on them does not count in the mean reward."""

_TERMINAL_CLASSES = frozenset({"skipped"})
"""Failure classes NeMo Gym never retries, whatever the row's ``_ng_failure_terminal`` says."""

MAX_RUN_ID = 256
"""The longest ``_ng_run_id`` taken as a run's id; a longer one (or one that is not a string) is no id."""

MAX_LATENCY_MS = 7 * 24 * 3600 * 1000
"""The longest ``ng_perf.total_latency_ms`` taken as a rollout's duration (a week); longer is no timing."""

_ROLLOUT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""NeMo Gym's pattern of an explicit rollout id (``rollout_correlation.ROLLOUT_ID_PATTERN``), at most 128
characters here: a row's id that does not match is not Gym's, and is not put on a span."""


def decode_row(line: bytes | memoryview) -> Row:
    """The row a line holds.

    Raises:
        Rejection: the line is not JSON (``malformed_json``) or not an object (``not_an_object``).
    """
    try:
        return _decode(line)
    except msgspec.ValidationError as exc:
        if "Expected `object`" in str(exc):
            raise Rejection("not_an_object", "the line is JSON but not an object") from exc
        raise Rejection("malformed_json", str(exc)) from exc
    except Exception as exc:  # DecodeError, and what else a hostile line sets off (RecursionError: too deep)
        raise Rejection("malformed_json", f"{type(exc).__name__}: {exc!s:.200}") from exc


def recover_row(line: bytes | memoryview) -> tuple[int, Row] | None:
    """The whole row at the end of a line whose start is torn, if there is one: (its offset, the row).

    A writer that dies mid-line leaves a line without its newline; the next writer's first row is then
    appended to it. Only a malformed line is searched, from the left, for a row that decodes whole, and at
    most ``_MAX_RECOVERY`` places are tried: a hostile line of nested objects costs a bounded number of
    decodes, not one per object.
    """
    data = bytes(line)  # only a malformed line comes here: one copy, then views of it
    view = memoryview(data)
    start = data.find(b'{"', 1)
    for _ in range(_MAX_RECOVERY):
        if start < 0:
            break
        try:
            return start, _decode(view[start:])
        except Exception:  # as in decode_row: whatever the decoder raises, this is not the row
            start = data.find(b'{"', start + 1)
    return None


def row_agent(row: Row) -> str | None:
    """The agent a row names: ``agent_ref.name``, else ``_ng_environment_server``.

    NeMo Gym 0.7.0's own rule for the agent a rollout ran on: its materialized inputs row names the agent
    (``agent_ref``) and its result and sidecar rows add the environment server that fronted it, so the
    agent is the one name all three rows share; a materialized taskset row names only its environment
    server, and so do its results. Gym keys its ``progress/<agent>/...`` metrics by that agent.
    """
    agent = row.agent_ref.get("name") if isinstance(row.agent_ref, dict) else None
    if agent is None or agent == "":
        agent = row.environment_server
    if agent is None or agent == "":
        return None
    if not isinstance(agent, str):
        raise Rejection("invalid_agent", f"the agent must be a string, got {type(agent).__name__}")
    return agent


def row_identity(row: Row) -> tuple[int, int] | None:
    """(task index, rollout index), or ``None`` when the row carries neither (``check_identity``'s rule)."""
    task, rollout = row.task_index, row.rollout_index
    if task is None and rollout is None:
        return None
    check_identity(task, rollout)
    return task, rollout


def row_run_id(row: Row) -> str | None:
    """The run a row belongs to (``_ng_run_id``, NeMo Gym's next release), ``None`` for a row of NeMo Gym
    0.7.0 (it has none) or one whose id is not a non-empty string of at most ``MAX_RUN_ID`` characters."""
    run_id = row.run_id
    if type(run_id) is not str or not 0 < len(run_id) <= MAX_RUN_ID:
        return None
    return run_id


def row_attempt(row: Row) -> int:
    """The attempt index: NeMo Gym 0.7.0 stamps retries 1, 2, ... and leaves the first attempt unstamped (0);
    its next release stamps every attempt from 0 (``_ng_attempt_index``), the same numbers."""
    attempt = row.attempt_index
    if attempt is None:
        return 0
    check_attempt(attempt)
    return int(attempt)


def failure_outcome(row: Row) -> tuple[Classified, bool, Where | None, tuple[OutcomeError, ...]]:
    """The outcome of a failures-file row, whether NeMo Gym treats it as terminal, and its (stage, delivery)
    with the refusals of values outside NeMo Gym's sets (``failure_where``).

    The stage is Gym's ``_ng_failure_stage`` (an Environment Server's failure), else the failure record's
    ``failure.stage``; the delivery is the failure record's ``delivery``. It is terminal when the row's
    ``_ng_failure_terminal`` or its failure record's ``failure.terminal`` says so, or for a skip.
    """
    record = row.failure_record
    record = record if isinstance(record, dict) else {}
    failure = record.get("failure")
    failure = failure if isinstance(failure, dict) else {}
    kind = failure.get("failure_kind") or row.failure_kind or row.failure_class
    reason = next(
        (
            text
            for text in (
                failure.get("failure_reason"),
                row.failure_reason,
                row.failure_message,
                row.error_message,
                row.judge_error,
                row.error_class,
            )
            if isinstance(text, str) and text
        ),
        None,
    )
    terminal = row.failure_terminal is True or failure.get("terminal") is True
    terminal = terminal or row.failure_class in _TERMINAL_CLASSES
    # A row of NeMo Gym's next release (it carries its run's id) that is a terminal skip is an omission, as
    # its rollout_records.disposition() counts it; NeMo Gym 0.7.0 counts a skip as a failure.
    omitted = row.omitted is True or (
        row_run_id(row) is not None and row.failure_class == "skipped" and row.failure_terminal is True
    )
    disposition = Disposition.OMITTED if omitted else Disposition.FAILED
    reward = None if row.failure_class in NO_RESULT_CLASSES else row.reward
    stage = row.failure_stage if row.failure_stage is not None else failure.get("stage")
    where, refused = failure_where(stage, record.get("delivery"))
    return absent(disposition, kind, reason, reward), terminal, where, refused


def row_latency(row: Row) -> float | None:
    """The rollout's duration in seconds as Gym measured it (``ng_perf.total_latency_ms``: from dispatching
    the rollout to its result; written when Gym's observability is on), or ``None`` without a usable one."""
    perf = row.perf
    latency = perf.get("total_latency_ms") if type(perf) is dict else None
    if type(latency) is not int and type(latency) is not float:  # a bool is no latency
        return None
    if not 0 <= latency <= MAX_LATENCY_MS:  # NaN fails both comparisons
        return None
    return latency / 1000


def row_perf_counts(row: Row) -> dict[str, int]:
    """The counts of a row's ``ng_perf`` that go on its span: ``rollout.turns`` (``num_turns``) and
    ``rollout.tool_calls`` (``num_tool_calls``), those that are non-negative integers."""
    perf = row.perf
    if type(perf) is not dict:
        return {}
    counts = {}
    for key, attribute in (("num_turns", "rollout.turns"), ("num_tool_calls", "rollout.tool_calls")):
        value = perf.get(key)
        if type(value) is int and value >= 0:
            counts[attribute] = value
    return counts


def gym_rollout_id(row: Row, identity: tuple[int, int] | None, attempt: int) -> str | None:
    """The id NeMo Gym gives the rollout (``nemo.gym.rollout.id`` on its own spans), as its
    ``maybe_rollout_id_from_run_body`` makes it: the row's ``_ng_rollout_id``, else ``<task>-<rollout>``;
    ``-a<attempt>`` appended for a retry. ``None`` when the row has neither, or an id Gym would refuse."""
    explicit = row.rollout_id
    if explicit is not None:
        if type(explicit) is not str or _ROLLOUT_ID.fullmatch(explicit) is None:
            return None
        rollout_id = explicit
    elif identity is not None:
        rollout_id = f"{identity[0]}-{identity[1]}"
    else:
        return None
    return f"{rollout_id}-a{attempt}" if attempt > 0 else rollout_id
