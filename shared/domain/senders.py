"""Senders: who hands the app its orders, known by where a message came from, never by what it
says. A deployment declares its senders (the Senders setting, from the Bicep's ``senders``);
each sends on a queue of its own under its own role, its order ids are its own, and its status
goes to its own queue only. Without any, every order comes from the one default sender, and
an order's reply_to names its status queue (under ReplyQueueAllowList).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shared.domain.workflow_message import ORDER_ID_PATTERN

# Short, and without '-' or '~': a sender's name is part of its queues' names and of its orders'
# record ids, and must be read back out of either unambiguously.
SENDER_PATTERN = r"[a-z][a-z0-9]{0,19}"
# Between a sender's name and its own order id in the record id: never in an order id
# (ORDER_ID_PATTERN), allowed in a Table key, a queue message, a URL path and a header.
SEPARATOR = "~"
# The id an order is kept under: a declared sender's name and its own id, or the default
# sender's id alone.
# The longest record id: the longest sender's name, the separator, the longest order id.
RECORD_ID_MAX = 20 + 1 + 128
RECORD_ID_PATTERN = rf"^(?:{SENDER_PATTERN}{SEPARATOR})?{ORDER_ID_PATTERN.removeprefix('^')}"


@dataclass(frozen=True)
class Sender:
    """``name`` empty: the default sender, whose order ids are the record ids."""
    name: str = ""

    @property
    def named(self) -> bool:
        return bool(self.name)

    @property
    def orders_queue(self) -> str:
        """The Service Bus queue it sends on (the default sender's is OrdersQueueName)."""
        return f"orders-{self.name}"

    @property
    def status_queue(self) -> str:
        """The Storage queue its status updates go to: no other sender's order names it."""
        return f"status-{self.name}"

    @property
    def intake_function(self) -> str:
        return f"intake_{self.name}" if self.name else "intake"

    def record_id(self, order_id: str) -> str:
        """The id the app keeps the sender's order under: the same id from two senders is two
        orders."""
        return f"{self.name}{SEPARATOR}{order_id}" if self.name else order_id

    def __str__(self) -> str:
        return self.name or "the default sender"


DEFAULT = Sender()


def of_record(record_id: str) -> tuple[Sender, str]:
    """The sender of the order kept under ``record_id``, and the id it gave the order."""
    name, sep, own = record_id.partition(SEPARATOR)
    return (Sender(name), own) if sep else (DEFAULT, record_id)


def own_id(record_id: str) -> str:
    """The id the sender gave the order: what its status updates name."""
    return of_record(record_id)[1]


def parse(declared: str) -> tuple[Sender, ...]:
    """The Senders setting: names, comma-separated; empty: the default sender only."""
    names = [n.strip() for n in declared.split(",") if n.strip()]
    for n in names:
        if not re.fullmatch(SENDER_PATTERN, n):
            raise ValueError(f"{n!r} is not a sender's name: a lower-case letter, then up to 19 "
                             "lower-case letters or digits")
    if len(set(names)) != len(names):
        raise ValueError("a sender is named twice")
    return tuple(Sender(n) for n in names)
