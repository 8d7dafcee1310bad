"""Every operator action as an audit event of its own (who by object id, what, when, why, how
it ended), apart from the order's record, whose history is capped and rewritten: a log record
the app only ever adds, which Application Insights keeps (docs/security-operators.md)."""

from __future__ import annotations

import logging
from datetime import datetime
from enum import StrEnum

log = logging.getLogger("order_pipeline.audit")


class OperatorAction(StrEnum):
    RESUBMIT = "resubmit"
    RESUBMIT_WITH_FORCE = "resubmit_with_force"
    ACKNOWLEDGE = "acknowledge"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    RESUME_ORDER = "resume_order"
    REDRIVE = "redrive"
    REDRIVE_PAUSE = "redrive_pause"
    REDRIVE_RESUME = "redrive_resume"
    REDRIVE_CANCEL = "redrive_cancel"


def audit(action: OperatorAction, target: str, by: str | None, why: str, outcome: str,
          at: datetime) -> None:
    """``by``: the principal as signed in (its name and object id); ``outcome``: done, or
    why it was refused."""
    log.warning(
        "OPERATOR_ACTION %s %s by %s at %s (%s): %s", action.value, target, by or "unknown",
        at.isoformat(), why or "no reason given", outcome,
        # Flat keys, as the alerts': each a customDimensions entry in Application Insights.
        extra={"audit_action": action.value, "audit_target": target, "audit_by": by or "",
               "audit_at": at.isoformat(), "audit_why": why, "audit_outcome": outcome})
