"""The Northwind Service Desk tools: one real Python function per API of the bundled library.

Each function takes the API's parameters as keywords plus an optional keyword-only ``context``
(a ``graph.context.Context``; its ``db_path`` names the SQLite file, else env
``FLOWDESK_DB_PATH``, else ``.flowdesk/demo.sqlite``) and returns a dict whose keys are exactly the
API's ``returns``.

Exactly once: every tool also takes a keyword-only ``idempotency_key`` (``ToolRunner`` passes the
agent's key for the call).  A write made under a key stores its result in ``idempotency_keys`` in the
*same transaction* as the write; a later call with the same key changes nothing and returns that
result — asked again after a crash, ``book_table`` answers with the booking it already made.

Error convention (one rule for every tool): when the *input* is wrong — unknown restaurant,
order, booking, customer or card, wrong PIN or email, malformed date, a precondition the server
enforces (booking a slot that is no longer free, refunding what is not refundable, a missing or
unknown ``auth_token``) — the tool returns ``{"error": "<what is wrong and how to fix it>"}``
and changes nothing.  ``ToolRunner`` records that as a failed call.  Facts about valid input
(a slot is taken, an order has shipped, a card is already blocked) are ordinary return values
that the procedures branch on.  Tools never raise for user mistakes.
"""

from __future__ import annotations

import functools
import json
import hashlib
import inspect
import os
import re
import sqlite3
from datetime import date, timedelta
from typing import Any

from .db import DEFAULT_DB_PATH, busy_tables, connect, desk_today, ensure_db, minutes

RETURN_WINDOW_DAYS = 30
ROOM_CAPACITY = {"single": 1, "double": 2, "suite": 4}
AREA_TITLES = {"old_town": "Old Town", "riverside": "Riverside", "harbour": "Harbour", "university": "University Quarter"}


class _Invalid(Exception):
    """A user-caused problem; turned into ``{"error": message}`` by ``@_tool``."""


def _tool(fn):
    """Open the database for the call, commit its write (with the idempotency record, see the module
    docstring) and turn ``_Invalid`` into an error result."""

    @functools.wraps(fn)
    def wrapper(*args, context: Any = None, idempotency_key: str | None = None, **kwargs):
        conn = _open(context)
        try:
            if idempotency_key:
                row = conn.execute("SELECT result FROM idempotency_keys WHERE key=?", (idempotency_key,)).fetchone()
                if row is not None:
                    return json.loads(row[0])  # done before under this key: its result, nothing changes
            result = fn(conn, *args, **kwargs)
            if conn.in_transaction:  # the tool wrote: record the key with the write, atomically
                if idempotency_key:
                    conn.execute("INSERT INTO idempotency_keys (key, tool, result) VALUES (?,?,?)",
                                 (idempotency_key, fn.__name__, json.dumps(result, default=str)))
                conn.execute("COMMIT")
            return result
        except sqlite3.IntegrityError:
            # Another process committed the same key between our lookup and our write: its result stands.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            row = conn.execute("SELECT result FROM idempotency_keys WHERE key=?", (idempotency_key,)).fetchone() \
                if idempotency_key else None
            if row is None:
                raise
            return json.loads(row[0])
        except _Invalid as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return {"error": str(exc)}
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    # The public signature is the API's parameters plus ``context`` and ``idempotency_key`` (bindings
    # inspect it to decide what to pass).
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]
    params.append(inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, default=None))
    params.append(inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None))
    wrapper.__signature__ = sig.replace(parameters=params)
    del wrapper.__wrapped__
    return wrapper


def db_path(context: Any = None) -> str:
    path = getattr(context, "db_path", None) if context is not None else None
    return path or os.environ.get("FLOWDESK_DB_PATH") or DEFAULT_DB_PATH


def _open(context: Any) -> sqlite3.Connection:
    path = db_path(context)
    ensure_db(path)
    return connect(path)


def _write(conn: sqlite3.Connection) -> None:
    # Take the write lock before reading, so check-then-write is atomic across processes.  ``@_tool``
    # commits when the tool returns (with its idempotency record).
    conn.execute("BEGIN IMMEDIATE")


# --- parsing and lookups -------------------------------------------------------------------------

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def _resolve_date(text: str, today: date) -> date | None:
    """ISO dates, today/tonight/tomorrow, weekday names (the next one, today included) and
    "4 December" / "Dec 4th" (this year, or next year once passed)."""
    low = re.sub(r"\s+", " ", text.lower().replace(",", " ")).strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", low):
        return date.fromisoformat(low)
    if low in ("today", "tonight"):
        return today
    if low == "tomorrow":
        return today + timedelta(days=1)
    if m := re.fullmatch(r"(?:on |this |next |coming )?(" + "|".join(WEEKDAYS) + r")", low):
        return today + timedelta(days=(WEEKDAYS.index(m.group(1)) - today.weekday()) % 7)
    mon = r"(" + "|".join(MONTHS) + r")[a-z]*\.?"
    m = re.fullmatch(rf"{mon} (\d{{1,2}})(?:st|nd|rd|th)?", low) or re.fullmatch(
        rf"(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{mon}", low)
    if m:
        a, b = m.groups()
        mname, day = (a, b) if a.isalpha() else (b, a)
        month = MONTHS.index(mname[:3]) + 1
        try:
            found = date(today.year, month, int(day))
            return found if found >= today else date(today.year + 1, month, int(day))
        except ValueError:
            return None
    return None


def _date(value: Any, field: str, *, future: bool = True) -> str:
    text = str(value).strip()
    today = desk_today()
    try:
        day = _resolve_date(text, today) if future else date.fromisoformat(text)
    except ValueError:
        day = None
    if day is None:
        raise _Invalid(f"{field} {text!r} is not a date; use YYYY-MM-DD, e.g. 2026-12-04")
    if future and day < today:
        raise _Invalid(f"{field} {day.isoformat()} is in the past (today is {today.isoformat()})")
    return day.isoformat()


def _time(value: Any, field: str) -> str:
    text = str(value).strip().lower().replace(".", ":")
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?", text)
    if not m:
        raise _Invalid(f"{field} {value!r} is not a time; use HH:MM, e.g. 19:30")
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    if m.group(3) == "pm" and hour < 12:
        hour += 12
    if m.group(3) == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        raise _Invalid(f"{field} {value!r} is not a valid time of day")
    return f"{hour:02d}:{minute:02d}"


def _positive_int(value: Any, field: str, maximum: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise _Invalid(f"{field} must be a whole number, got {value!r}") from None
    if not 1 <= n <= maximum:
        raise _Invalid(f"{field} must be between 1 and {maximum}, got {n}")
    return n


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", str(text).lower()).strip()


def _by_name(conn: sqlite3.Connection, table: str, name: str, what: str) -> sqlite3.Row:
    """Exact (case/punctuation-insensitive) name, else a unique partial match, else an error."""
    rows = conn.execute(f"SELECT * FROM {table} ORDER BY name").fetchall()
    want = _norm(name)
    exact = [r for r in rows if _norm(r["name"]) == want]
    partial = [r for r in rows if want and want in _norm(r["name"])]
    if exact:
        return exact[0]
    if len(partial) == 1:
        return partial[0]
    options = ", ".join(r["name"] for r in (partial or rows))
    raise _Invalid(f"unknown {what} {name!r}; " + ("did you mean one of: " if partial else "we have: ") + options)


def _ref_number(value: Any, prefix: str, what: str) -> int:
    m = re.fullmatch(rf"\s*(?:{prefix})?\s*-?\s*(\d+)\s*", str(value), flags=re.I)
    if not m:
        raise _Invalid(f"{what} {value!r} is not a valid reference; it looks like {prefix}-1001")
    return int(m.group(1))


def _money(x: float) -> str:
    return f"€{x:,.2f}"


def _when(day: str, time: str | None = None) -> str:
    """'Fri 4 Dec 2026 at 19:30': the resolved date, whatever words the user said."""
    d = date.fromisoformat(day)
    text = f"{d.strftime('%a')} {d.day} {d.strftime('%b %Y')}"
    return f"{text} at {time}" if time else text


# --- dining ----------------------------------------------------------------------------------------

def _service_times(rest: sqlite3.Row) -> list[str]:
    start, end = minutes(rest["opens"]), minutes(rest["last_seating"])
    return [f"{m // 60:02d}:{m % 60:02d}" for m in range(start, end + 1, 30)]


def _free_table(conn, rest, party: int, day: str, time: str, exclude: int | None = None) -> int | None:
    busy = busy_tables(conn, rest["id"], day, time, exclude)
    for tid, seats in conn.execute("SELECT id, seats FROM restaurant_tables WHERE restaurant_id=? AND seats>=? "
                                   "ORDER BY seats, id", (rest["id"], party)):
        if tid not in busy:
            return tid
    return None


def _slot_request(conn, restaurant: Any, party_size: Any, day: Any, time: Any, prefix: str = ""):
    rest = _by_name(conn, "restaurants", restaurant, "restaurant")
    party = _positive_int(party_size, "party_size", 20)
    day = _date(day, prefix + "date")
    time = _time(time, prefix + "time")
    largest = conn.execute("SELECT MAX(seats) FROM restaurant_tables WHERE restaurant_id=?", (rest["id"],)).fetchone()[0]
    if party > largest:
        raise _Invalid(f"{rest['name']}'s largest table seats {largest}; a party of {party} cannot be booked there")
    times = _service_times(rest)
    if time not in times:
        raise _Invalid(f"{rest['name']} seats guests on the hour and half hour from {rest['opens']} to "
                       f"{rest['last_seating']}; {time} is not one of those times")
    return rest, party, day, time


def _availability(conn, rest, party: int, day: str, time: str, exclude: int | None = None) -> dict:
    if _free_table(conn, rest, party, day, time, exclude) is not None:
        return {"available": True, "alternatives": ""}
    free = [t for t in _service_times(rest) if t != time and _free_table(conn, rest, party, day, t, exclude)]
    nearest = sorted(sorted(free, key=lambda t: abs(minutes(t) - minutes(time)))[:3])
    return {"available": False, "alternatives": ", ".join(nearest) if nearest else "none that day"}


@_tool
def search_restaurants(conn, cuisine: str, area: str) -> dict:
    """Restaurants serving ``cuisine`` in ``area`` ("any" for every area)."""
    query, args = "SELECT * FROM restaurants WHERE cuisine=?", [str(cuisine).lower()]
    wanted = _norm(area)
    if wanted not in ("any", ""):
        # Accept the enum value ("old_town") or the area's title ("Old Town").
        codes = [code for code, title in AREA_TITLES.items() if wanted in (_norm(code), _norm(title))]
        if not codes:
            raise _Invalid(f"unknown area {area!r}; areas are: any, {', '.join(AREA_TITLES)}")
        query += " AND area=?"
        args.append(codes[0])
    rows = conn.execute(query + " ORDER BY name", args).fetchall()
    listing = "; ".join(f"{r['name']} ({AREA_TITLES.get(r['area'], r['area'])}, {r['price']}, "
                        f"seating {r['opens']}-{r['last_seating']})" for r in rows)
    return {"found": bool(rows), "restaurants": listing}


@_tool
def check_availability(conn, restaurant: str, party_size: int, date: str, time: str) -> dict:
    rest, party, day, t = _slot_request(conn, restaurant, party_size, date, time)
    return _availability(conn, rest, party, day, t)


@_tool
def book_table(conn, restaurant: str, party_size: int, date: str, time: str, guest_name: str) -> dict:
    _write(conn)
    rest, party, day, t = _slot_request(conn, restaurant, party_size, date, time)
    if not str(guest_name).strip():
        raise _Invalid("guest_name is empty; whose name should the booking be under?")
    table = _free_table(conn, rest, party, day, t)
    if table is None:  # server-side precondition: only a free slot can be booked
        alt = _availability(conn, rest, party, day, t)["alternatives"]
        raise _Invalid(f"no table for {party} is free at {rest['name']} on {day} at {t} (free times: {alt})")
    cur = conn.execute("INSERT INTO bookings (restaurant_id, table_id, date, time, party_size, guest_name) "
                       "VALUES (?,?,?,?,?,?)", (rest["id"], table, day, t, party, str(guest_name).strip()))
    return {"booking_id": f"B-{cur.lastrowid}", "booked_for": _when(day, t)}


def _booking(conn, booking_id: Any) -> sqlite3.Row:
    n = _ref_number(booking_id, "B", "booking reference")
    row = conn.execute("SELECT b.*, r.name AS restaurant FROM bookings b JOIN restaurants r ON r.id=b.restaurant_id "
                       "WHERE b.id=?", (n,)).fetchone()
    if row is None:
        raise _Invalid(f"there is no booking B-{n}; please check the reference (it looks like B-1001)")
    return row


@_tool
def find_booking(conn, booking_id: str) -> dict:
    b = _booking(conn, booking_id)
    return {"restaurant": b["restaurant"], "date": b["date"], "time": b["time"],
            "party_size": b["party_size"], "status": b["status"]}


def _active_booking(conn, booking_id: Any) -> sqlite3.Row:
    b = _booking(conn, booking_id)
    if b["status"] != "confirmed":
        raise _Invalid(f"booking B-{b['id']} is {b['status']} and cannot be changed")
    return b


@_tool
def check_new_time(conn, booking_id: str, new_date: str, new_time: str) -> dict:
    b = _active_booking(conn, booking_id)
    rest, party, day, t = _slot_request(conn, b["restaurant"], b["party_size"], new_date, new_time, "new_")
    return _availability(conn, rest, party, day, t, exclude=b["id"])


@_tool
def reschedule_booking(conn, booking_id: str, new_date: str, new_time: str) -> dict:
    _write(conn)
    b = _active_booking(conn, booking_id)
    rest, party, day, t = _slot_request(conn, b["restaurant"], b["party_size"], new_date, new_time, "new_")
    table = _free_table(conn, rest, party, day, t, exclude=b["id"])
    if table is None:
        raise _Invalid(f"{rest['name']} has no free table for {party} on {day} at {t}")
    conn.execute("UPDATE bookings SET date=?, time=?, table_id=? WHERE id=?", (day, t, table, b["id"]))
    return {"booked_for": _when(day, t)}


@_tool
def cancel_booking(conn, booking_id: str) -> dict:
    _write(conn)
    b = _booking(conn, booking_id)
    if b["status"] == "cancelled":
        raise _Invalid(f"booking B-{b['id']} is already cancelled")
    conn.execute("UPDATE bookings SET status='cancelled' WHERE id=?", (b["id"],))
    return {"cancelled": True}


# --- retail ----------------------------------------------------------------------------------------

def _order(conn, order_id: Any, email: Any | None = None) -> sqlite3.Row:
    n = _ref_number(order_id, "ORD", "order number")
    row = conn.execute("SELECT * FROM orders WHERE id=?", (f"ORD-{n}",)).fetchone()
    if row is None:
        raise _Invalid(f"there is no order ORD-{n}; order numbers look like ORD-7001")
    if email is not None and str(email).strip().lower() != row["email"]:
        raise _Invalid(f"the email address does not match the one on order {row['id']}")
    return row


def _items(conn, order_id: str) -> list[sqlite3.Row]:
    return conn.execute("SELECT * FROM order_items WHERE order_id=? ORDER BY id", (order_id,)).fetchall()


@_tool
def verify_order(conn, order_id: str, email: str) -> dict:
    o = _order(conn, order_id, email)
    items = "; ".join(f"{i['name']} ({_money(i['price'])})" for i in _items(conn, o["id"]))
    return {"customer_name": o["customer_name"], "status": o["status"], "total": o["total"], "items": items}


@_tool
def track_order(conn, order_id: str, email: str) -> dict:
    o = _order(conn, order_id, email)
    return {"status": o["status"], "carrier": o["carrier"] or "", "tracking_number": o["tracking_number"] or "",
            "estimated_delivery": o["delivered_on"] or o["estimated_delivery"] or ""}


@_tool
def cancel_order(conn, order_id: str, email: str, reason: str) -> dict:
    _write(conn)
    o = _order(conn, order_id, email)
    if o["status"] != "processing":  # server-side: only orders still in the warehouse can be cancelled
        raise _Invalid(f"order {o['id']} is {o['status']}; only orders that have not shipped can be cancelled")
    amount = round(o["total"] - o["refunded"], 2)
    conn.execute("UPDATE orders SET status='cancelled', cancel_reason=?, refunded=refunded+? WHERE id=?",
                 (str(reason), amount, o["id"]))
    conn.execute("INSERT INTO refunds (order_id, amount, reason, created_on) VALUES (?,?,?,?)",
                 (o["id"], amount, "order_cancelled", desk_today().isoformat()))
    return {"refund_amount": amount}


def _item(conn, order: sqlite3.Row, item: Any) -> sqlite3.Row:
    items = _items(conn, order["id"])
    want = _norm(item)
    hits = [i for i in items if _norm(i["name"]) == want] or \
        [i for i in items if want and (want in _norm(i["name"]) or _norm(i["name"]) in want)]
    if len(hits) != 1:
        # Free text ("the vase, it is faulty"): the item sharing the most words, if only one does.
        words = set(want.split())
        overlap = [(len(words & set(_norm(i["name"]).split())), i) for i in items]
        best = max((n for n, _ in overlap), default=0)
        if best and sum(n == best for n, _ in overlap) == 1:
            hits = [i for n, i in overlap if n == best]
    if len(hits) != 1:
        names = "; ".join(i["name"] for i in items)
        raise _Invalid(f"order {order['id']} has no single item matching {item!r}; its items are: {names}")
    return hits[0]


def _return_check(conn, order: sqlite3.Row, item: sqlite3.Row) -> dict:
    deadline = ""
    if order["delivered_on"]:
        deadline = (date.fromisoformat(order["delivered_on"]) + timedelta(days=RETURN_WINDOW_DAYS)).isoformat()
    if item["returned"]:
        why = "this item has already been returned"
    elif order["status"] not in ("delivered", "return_requested"):
        why = f"the order is {order['status']}; only delivered items can be returned"
    elif deadline < desk_today().isoformat():
        why = f"the {RETURN_WINDOW_DAYS}-day return window closed on {deadline}"
    else:
        why = ""
    return {"eligible": not why, "why_not": why, "return_deadline": deadline}


@_tool
def check_return_eligibility(conn, order_id: str, item: str) -> dict:
    o = _order(conn, order_id)
    return _return_check(conn, o, _item(conn, o, item))


@_tool
def create_return(conn, order_id: str, email: str, item: str, reason: str) -> dict:
    _write(conn)
    o = _order(conn, order_id, email)
    it = _item(conn, o, item)
    check = _return_check(conn, o, it)
    if not check["eligible"]:
        raise _Invalid(f"{it['name']} cannot be returned: {check['why_not']}")
    cur = conn.execute("INSERT INTO returns (order_id, item_id, reason, created_on) VALUES (?,?,?,?)",
                       (o["id"], it["id"], str(reason), desk_today().isoformat()))
    conn.execute("UPDATE order_items SET returned=1 WHERE id=?", (it["id"],))
    conn.execute("UPDATE orders SET status='return_requested' WHERE id=?", (o["id"],))
    return {"return_id": f"R-{cur.lastrowid + 3000}", "refund_estimate": it["price"]}


def _refund_check(conn, o: sqlite3.Row, reason: str) -> tuple[float, str]:
    """(amount, why_not) for a refund of order ``o`` for ``reason``."""
    outstanding = round(o["total"] - o["refunded"], 2)
    status = o["status"]
    if status == "refunded" or outstanding <= 0:
        return 0.0, "this order has already been refunded in full"
    if reason == "item_returned":
        if status == "returned":
            returned = sum(i["price"] for i in _items(conn, o["id"]) if i["returned"])
            return round(min(returned, outstanding), 2), ""
        if status == "return_requested":
            return 0.0, "the return is on its way to us; the refund is issued when it arrives"
        return 0.0, "there is no return on record for this order; start a return first"
    if reason == "order_cancelled":
        return (outstanding, "") if status == "cancelled" else (0.0, f"the order is {status}, not cancelled")
    if reason == "damaged_on_arrival":
        if status != "delivered":
            return 0.0, f"the order is {status}; damage refunds are for delivered orders"
        if date.fromisoformat(o["delivered_on"]) + timedelta(days=RETURN_WINDOW_DAYS) < desk_today():
            return 0.0, f"damage must be reported within {RETURN_WINDOW_DAYS} days of delivery"
        return outstanding, ""
    if reason == "never_arrived":
        if status != "shipped":
            return 0.0, f"the order is {status}, so it is not missing in transit"
        if o["estimated_delivery"] and date.fromisoformat(o["estimated_delivery"]) + timedelta(days=3) > desk_today():
            return 0.0, f"it is still in transit (expected {o['estimated_delivery']}); wait 3 days past that date"
        return outstanding, ""
    if reason == "charged_twice":
        if o["charged_times"] <= 1:
            return 0.0, "our records show a single charge for this order"
        return round(o["total"] * (o["charged_times"] - 1), 2), ""
    raise _Invalid(f"unknown refund reason {reason!r}")


@_tool
def check_refund_eligibility(conn, order_id: str, reason: str) -> dict:
    amount, why = _refund_check(conn, _order(conn, order_id), str(reason))
    return {"eligible": not why, "amount": amount, "why_not": why}


@_tool
def refund_order(conn, order_id: str, email: str, reason: str) -> dict:
    _write(conn)
    o = _order(conn, order_id, email)  # server-side re-verification of the order and the email
    amount, why = _refund_check(conn, o, str(reason))
    if why:
        raise _Invalid(f"order {o['id']} cannot be refunded: {why}")
    if reason == "charged_twice":
        conn.execute("UPDATE orders SET charged_times=1 WHERE id=?", (o["id"],))
    else:
        conn.execute("UPDATE orders SET refunded=refunded+?, status='refunded' WHERE id=?", (amount, o["id"]))
    cur = conn.execute("INSERT INTO refunds (order_id, amount, reason, created_on) VALUES (?,?,?,?)",
                       (o["id"], amount, str(reason), desk_today().isoformat()))
    return {"refund_id": f"RF-{cur.lastrowid + 8000}", "amount_refunded": amount}


# --- banking ---------------------------------------------------------------------------------------

def _customer(conn, customer_id: Any) -> sqlite3.Row:
    n = _ref_number(customer_id, "C", "customer number")
    row = conn.execute("SELECT * FROM customers WHERE id=?", (f"C-{n}",)).fetchone()
    if row is None:
        raise _Invalid(f"there is no customer C-{n}; customer numbers look like C-1001")
    return row


def _issue_token(conn, customer_id: str) -> str:
    _write(conn)
    n = conn.execute("SELECT COUNT(*) FROM auth_tokens WHERE customer_id=?", (customer_id,)).fetchone()[0]
    # Deterministic per database state, so replayed sessions see the same tokens.
    token = "AUTH-" + hashlib.sha256(f"{customer_id}:{n}".encode()).hexdigest()[:12].upper()
    conn.execute("INSERT INTO auth_tokens VALUES (?,?,?)", (token, customer_id, desk_today().isoformat()))
    return token


def _authorised(conn, auth_token: Any) -> sqlite3.Row:
    row = conn.execute("SELECT c.* FROM auth_tokens t JOIN customers c ON c.id=t.customer_id WHERE t.token=?",
                       (str(auth_token).strip(),)).fetchone()
    if row is None:
        raise _Invalid("auth_token is not valid; verify the customer's identity first")
    return row


@_tool
def verify_identity(conn, customer_id: str, pin: str) -> dict:
    c = _customer(conn, customer_id)
    if str(pin).strip().zfill(4) != c["pin"]:  # an integer PIN loses its leading zeros
        raise _Invalid(f"the PIN does not match customer {c['id']}")
    return {"customer_name": c["name"], "auth_token": _issue_token(conn, c["id"])}


@_tool
def verify_personal_details(conn, customer_id: str, date_of_birth: str) -> dict:
    c = _customer(conn, customer_id)
    if _date(date_of_birth, "date_of_birth", future=False) != c["date_of_birth"]:
        raise _Invalid(f"the date of birth does not match customer {c['id']}")
    return {"customer_name": c["name"], "auth_token": _issue_token(conn, c["id"]), "locked": bool(c["locked"])}


@_tool
def get_balance(conn, auth_token: str, account_type: str) -> dict:
    c = _authorised(conn, auth_token)
    row = conn.execute("SELECT balance, currency FROM accounts WHERE customer_id=? AND type=?",
                       (c["id"], str(account_type).lower())).fetchone()
    if row is None:
        return {"has_account": False, "balance": 0.0, "currency": ""}
    return {"has_account": True, "balance": round(row["balance"], 2), "currency": row["currency"]}


def _funds(conn, customer: sqlite3.Row, from_account: Any, amount: Any):
    src_type = str(from_account).lower()
    dst_type = {"checking": "savings", "savings": "checking"}.get(src_type)
    if dst_type is None:
        raise _Invalid(f"from_account must be checking or savings, got {from_account!r}")
    try:
        value = round(float(amount), 2)
    except (TypeError, ValueError):
        raise _Invalid(f"amount must be a number, got {amount!r}") from None
    if value <= 0:
        raise _Invalid("amount must be more than zero")
    accounts = {r["type"]: r for r in conn.execute("SELECT * FROM accounts WHERE customer_id=?", (customer["id"],))}
    for kind in (src_type, dst_type):
        if kind not in accounts:
            raise _Invalid(f"{customer['name']} has no {kind} account, so there is nothing to transfer between")
    return accounts[src_type], accounts[dst_type], value


@_tool
def check_funds(conn, auth_token: str, from_account: str, amount: float) -> dict:
    src, _, value = _funds(conn, _authorised(conn, auth_token), from_account, amount)
    return {"has_funds": src["balance"] >= value, "available_balance": round(src["balance"], 2)}


@_tool
def transfer_funds(conn, auth_token: str, from_account: str, amount: float) -> dict:
    _write(conn)
    customer = _authorised(conn, auth_token)
    src, dst, value = _funds(conn, customer, from_account, amount)
    if src["balance"] < value:  # server-side: no overdraft through the desk
        raise _Invalid(f"the {src['type']} account holds {_money(src['balance'])}, less than {_money(value)}")
    conn.execute("UPDATE accounts SET balance=balance-? WHERE id=?", (value, src["id"]))
    conn.execute("UPDATE accounts SET balance=balance+? WHERE id=?", (value, dst["id"]))
    cur = conn.execute("INSERT INTO transfers (customer_id, from_type, to_type, amount, made_on) VALUES (?,?,?,?,?)",
                       (customer["id"], src["type"], dst["type"], value, desk_today().isoformat()))
    return {"transfer_id": f"T-{cur.lastrowid + 40000}", "new_balance": round(src["balance"] - value, 2)}


def _mask_email(email: str) -> str:
    user, _, domain = email.partition("@")
    return f"{user[0]}***@{domain}"


@_tool
def send_reset_link(conn, auth_token: str, channel: str) -> dict:
    c = _authorised(conn, auth_token)
    if c["locked"]:
        raise _Invalid("the online banking profile is locked; it can only be unlocked in a branch")
    channel = str(channel).lower()
    if channel not in ("email", "sms"):
        raise _Invalid(f"channel must be email or sms, got {channel!r}")
    sent_to = _mask_email(c["email"]) if channel == "email" else "phone ending " + c["phone"][-4:]
    _write(conn)
    conn.execute("INSERT INTO password_resets (customer_id, channel, sent_to, sent_on) VALUES (?,?,?,?)",
                 (c["id"], channel, sent_to, desk_today().isoformat()))
    return {"sent_to": sent_to, "expires_in_minutes": 30}


@_tool
def update_address(conn, auth_token: str, new_address: str) -> dict:
    addr = " ".join(str(new_address).split())
    if len(addr) < 8 or not re.search(r"\d", addr):
        raise _Invalid(f"{new_address!r} does not look like a full postal address (house number, street, town)")
    _write(conn)
    c = _authorised(conn, auth_token)
    conn.execute("UPDATE customers SET address=? WHERE id=?", (addr, c["id"]))
    shipping = conn.execute("SELECT COUNT(*) FROM cards WHERE customer_id=? AND status='shipping'",
                            (c["id"],)).fetchone()[0]
    return {"previous_address": c["address"], "cards_in_transit": shipping > 0}


def _card(conn, customer: sqlite3.Row, card_last4: Any) -> sqlite3.Row:
    digits = re.sub(r"\D", "", str(card_last4))[-4:].zfill(4)
    row = conn.execute("SELECT * FROM cards WHERE customer_id=? AND last4=?", (customer["id"], digits)).fetchone()
    if row is None:
        raise _Invalid(f"{customer['name']} has no card ending in {digits or repr(card_last4)}")
    return row


@_tool
def get_card_status(conn, auth_token: str, card_last4: str) -> dict:
    card = _card(conn, _authorised(conn, auth_token), card_last4)
    return {"card_status": card["status"], "card_kind": card["kind"]}


def _replacement_eta() -> str:
    return (desk_today() + timedelta(days=5)).isoformat()


@_tool
def block_card(conn, auth_token: str, card_last4: str, reason: str) -> dict:
    _write(conn)
    card = _card(conn, _authorised(conn, auth_token), card_last4)
    if card["status"] == "blocked":
        raise _Invalid(f"the card ending in {card['last4']} is already blocked")
    conn.execute("UPDATE cards SET status='blocked', block_reason=? WHERE id=?", (str(reason), card["id"]))
    return {"blocked": True, "replacement_eta": _replacement_eta()}


@_tool
def list_recent_transactions(conn, auth_token: str, card_last4: str) -> dict:
    card = _card(conn, _authorised(conn, auth_token), card_last4)
    since = (desk_today() - timedelta(days=30)).isoformat()
    rows = conn.execute("SELECT * FROM card_transactions WHERE card_id=? AND date>=? AND disputed=0 ORDER BY date, id",
                        (card["id"], since)).fetchall()
    listing = "; ".join(f"{r['id']} {r['date']} {r['merchant']} {_money(r['amount'])}" for r in rows)
    return {"found": bool(rows), "transactions": listing}


@_tool
def open_fraud_case(conn, auth_token: str, card_last4: str, transaction_ids: str) -> dict:
    _write(conn)
    customer = _authorised(conn, auth_token)
    card = _card(conn, customer, card_last4)
    wanted = sorted({f"TX-{n}" for n in re.findall(r"(?i)(?:TX)?-?\s*(\d{4,})", str(transaction_ids))})
    if not wanted:
        raise _Invalid(f"no transaction references in {transaction_ids!r}; they look like TX-5001")
    rows = {r["id"]: r for r in conn.execute(
        f"SELECT * FROM card_transactions WHERE card_id=? AND id IN ({','.join('?' * len(wanted))})",
        (card["id"], *wanted))}
    missing = [t for t in wanted if t not in rows]
    if missing:
        raise _Invalid(f"{', '.join(missing)} not found on the card ending in {card['last4']}")
    disputed = [t for t in wanted if rows[t]["disputed"]]
    if disputed:
        raise _Invalid(f"{', '.join(disputed)} already disputed")
    amount = round(sum(rows[t]["amount"] for t in wanted), 2)
    conn.execute(f"UPDATE card_transactions SET disputed=1 WHERE id IN ({','.join('?' * len(wanted))})", wanted)
    # A fraud report always stops the card: the details are compromised.
    conn.execute("UPDATE cards SET status='blocked', block_reason='fraud' WHERE id=?", (card["id"],))
    cur = conn.execute("INSERT INTO fraud_cases (customer_id, card_id, transaction_ids, amount, opened_on) "
                       "VALUES (?,?,?,?,?)", (customer["id"], card["id"], ",".join(wanted), amount,
                                             desk_today().isoformat()))
    return {"case_id": f"FC-{cur.lastrowid + 600}", "disputed_amount": amount, "replacement_eta": _replacement_eta()}


# --- travel ----------------------------------------------------------------------------------------

def _rooms_free(conn, hotel_id: int, room_type: str, check_in: str, nights: int) -> int:
    """Rooms of this type free on every night of the stay."""
    row = conn.execute("SELECT count FROM hotel_rooms WHERE hotel_id=? AND room_type=?",
                       (hotel_id, room_type)).fetchone()
    if row is None:
        return 0
    start = date.fromisoformat(check_in)
    stays = conn.execute("SELECT check_in, nights FROM hotel_reservations WHERE hotel_id=? AND room_type=? "
                         "AND status='confirmed'", (hotel_id, room_type)).fetchall()
    free = row["count"]
    for k in range(nights):
        night = start + timedelta(days=k)
        taken = sum(1 for ci, n in stays
                    if date.fromisoformat(ci) <= night < date.fromisoformat(ci) + timedelta(days=n))
        free = min(free, row["count"] - taken)
    return max(free, 0)


def _stay(conn, hotel: Any, room_type: Any, check_in: Any, nights: Any):
    h = _by_name(conn, "hotels", hotel, "hotel")
    offered = [r["room_type"] for r in conn.execute("SELECT room_type FROM hotel_rooms WHERE hotel_id=?", (h["id"],))]
    rt = str(room_type).lower()
    if rt not in offered:
        raise _Invalid(f"{h['name']} has no {rt} rooms; it offers {', '.join(offered)}")
    rate = conn.execute("SELECT nightly_rate FROM hotel_rooms WHERE hotel_id=? AND room_type=?",
                        (h["id"], rt)).fetchone()[0]
    return h, rt, _date(check_in, "check_in"), _positive_int(nights, "nights", 14), rate


@_tool
def search_hotels(conn, city: str, check_in: str, nights: int, guests: int) -> dict:
    day = _date(check_in, "check_in")
    n = _positive_int(nights, "nights", 14)
    g = _positive_int(guests, "guests", max(ROOM_CAPACITY.values()))
    options = []
    for h in conn.execute("SELECT * FROM hotels WHERE city=? ORDER BY stars DESC, name", (_norm(city),)):
        fits = [(r["nightly_rate"], r["room_type"]) for r in
                conn.execute("SELECT * FROM hotel_rooms WHERE hotel_id=? ORDER BY nightly_rate", (h["id"],))
                if ROOM_CAPACITY[r["room_type"]] >= g and _rooms_free(conn, h["id"], r["room_type"], day, n)]
        if fits:
            rate, rt = fits[0]
            options.append(f"{h['name']} ({h['stars']}★, {h['neighbourhood']}): {rt} from {_money(rate)}/night, "
                           f"{_money(rate * n)} for {n} night{'s' if n > 1 else ''}")
    return {"found": bool(options), "hotels": "; ".join(options)}


@_tool
def check_room_availability(conn, hotel: str, room_type: str, check_in: str, nights: int) -> dict:
    h, rt, day, n, rate = _stay(conn, hotel, room_type, check_in, nights)
    return {"available": _rooms_free(conn, h["id"], rt, day, n) > 0, "nightly_rate": rate,
            "total_price": round(rate * n, 2)}


@_tool
def book_room(conn, hotel: str, room_type: str, check_in: str, nights: int, guest_name: str) -> dict:
    _write(conn)
    h, rt, day, n, rate = _stay(conn, hotel, room_type, check_in, nights)
    if not str(guest_name).strip():
        raise _Invalid("guest_name is empty; whose name should the reservation be under?")
    if _rooms_free(conn, h["id"], rt, day, n) <= 0:  # server-side: only a free room can be booked
        raise _Invalid(f"{h['name']} has no {rt} room free for {n} night(s) from {day}")
    cur = conn.execute("INSERT INTO hotel_reservations (hotel_id, room_type, check_in, nights, guest_name) "
                       "VALUES (?,?,?,?,?)", (h["id"], rt, day, n, str(guest_name).strip()))
    end = (date.fromisoformat(day) + timedelta(days=n)).isoformat()
    return {"reservation_id": f"H-{cur.lastrowid}", "stay_dates": f"{_when(day)} to {_when(end)}"}
