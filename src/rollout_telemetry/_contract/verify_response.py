"""``VerifyResponse``: the verify response as a pydantic model, for a boundary where input arrives as data.

Its own module: pydantic is imported only by those who use it (``record()`` reads plain dicts and objects).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, model_validator

from rollout_telemetry._contract.outcome import Disposition, check_outcome

__all__ = ["VerifyResponse"]


class VerifyResponse(BaseModel):
    """What a verify response carries; extra fields are allowed and kept.

    Use it at a boundary where input arrives as data (a JSONL row, a request body). ``record()`` reads
    plain dicts and objects directly, applying the same checks without building a model.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    reward: float | None = None
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data  # pydantic refuses what is not a mapping
        disposition, reward, kind, reason, _ = check_outcome(
            None,
            data.get("reward"),
            data.get("mask_sample"),
            data.get("failure_kind"),
            data.get("failure_reason"),
        )
        checked = {
            "reward": reward,
            "mask_sample": disposition is Disposition.MASKED,
            "failure_kind": kind,
            "failure_reason": reason,
        }
        return {**data, **checked}
