"""Misbehaving tools for tests/test_faults_tools.py (bound through FLOWDESK_TOOL_MODULES=fault_tools):
each takes ``book``'s parameters and fails in one way a real tool can."""

from __future__ import annotations

import time


def book_slow(restaurant: str, party_size: int, date: str, time_: str = "", **_) -> dict:
    time.sleep(5)  # longer than the test's tool_timeout
    return {"booking_id": "B-late", "booked_for": date}


def book_raises(**_) -> dict:
    raise ConnectionError("reservation service reset the connection")


def book_malformed(**_) -> dict:
    return {"booking_id": {"B", "set"}, "booked_for": float("nan")}
