"""The Northwind Service Desk database: schema, deterministic seed data and safe creation.

``ensure_db(path)`` creates the SQLite file once (tables ``IF NOT EXISTS``, seed only when the
``meta`` marker is absent, all inside one ``BEGIN IMMEDIATE`` transaction so two processes
racing on a fresh file seed it exactly once).  Bump ``SEED_VERSION`` when the seed changes: an
older demo database is then emptied and seeded again.  ``connect(path)`` opens it for the tools.
All data is fictional; the desk's calendar is fixed at ``DEMO_TODAY`` so results never depend
on the wall clock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from datetime import date
from pathlib import Path

DEFAULT_DB_PATH = ".flowdesk/demo.sqlite"
SEED_VERSION = "northwind-1"
# The desk's "today": return windows, late deliveries and past-date checks are relative to it.
DEMO_TODAY = date(2026, 11, 20)


def desk_today() -> date:
    """The desk's calendar date: env ``FLOWDESK_DEMO_TODAY`` (YYYY-MM-DD) or ``DEMO_TODAY``."""
    raw = os.environ.get("FLOWDESK_DEMO_TODAY", "").strip()
    return date.fromisoformat(raw) if raw else DEMO_TODAY

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS restaurants (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, cuisine TEXT NOT NULL, area TEXT NOT NULL,
    price TEXT NOT NULL, opens TEXT NOT NULL, last_seating TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS restaurant_tables (
    id INTEGER PRIMARY KEY, restaurant_id INTEGER NOT NULL REFERENCES restaurants(id), seats INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bookings (
    id INTEGER PRIMARY KEY, restaurant_id INTEGER NOT NULL REFERENCES restaurants(id),
    table_id INTEGER NOT NULL REFERENCES restaurant_tables(id), date TEXT NOT NULL, time TEXT NOT NULL,
    party_size INTEGER NOT NULL, guest_name TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'confirmed');
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, pin TEXT NOT NULL,
    date_of_birth TEXT NOT NULL, phone TEXT NOT NULL, address TEXT NOT NULL, locked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS accounts (
    id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id), type TEXT NOT NULL,
    balance REAL NOT NULL, currency TEXT NOT NULL DEFAULT 'EUR');
CREATE TABLE IF NOT EXISTS transfers (
    id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL, from_type TEXT NOT NULL, to_type TEXT NOT NULL,
    amount REAL NOT NULL, made_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cards (
    id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id), last4 TEXT NOT NULL,
    kind TEXT NOT NULL, status TEXT NOT NULL, block_reason TEXT);
CREATE TABLE IF NOT EXISTS card_transactions (
    id TEXT PRIMARY KEY, card_id INTEGER NOT NULL REFERENCES cards(id), date TEXT NOT NULL,
    merchant TEXT NOT NULL, amount REAL NOT NULL, disputed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS fraud_cases (
    id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL, card_id INTEGER NOT NULL, transaction_ids TEXT NOT NULL,
    amount REAL NOT NULL, opened_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS auth_tokens (
    token TEXT PRIMARY KEY, customer_id TEXT NOT NULL, issued_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS password_resets (
    id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL, channel TEXT NOT NULL, sent_to TEXT NOT NULL,
    sent_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY, email TEXT NOT NULL, customer_name TEXT NOT NULL, status TEXT NOT NULL,
    placed_on TEXT NOT NULL, delivered_on TEXT, estimated_delivery TEXT, carrier TEXT, tracking_number TEXT,
    total REAL NOT NULL, charged_times INTEGER NOT NULL DEFAULT 1, refunded REAL NOT NULL DEFAULT 0,
    cancel_reason TEXT);
CREATE TABLE IF NOT EXISTS order_items (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id), name TEXT NOT NULL,
    price REAL NOT NULL, returned INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS returns (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, item_id INTEGER NOT NULL, reason TEXT NOT NULL,
    created_on TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'label_sent');
CREATE TABLE IF NOT EXISTS refunds (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount REAL NOT NULL, reason TEXT NOT NULL,
    created_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hotels (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, city TEXT NOT NULL, stars INTEGER NOT NULL,
    neighbourhood TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hotel_rooms (
    hotel_id INTEGER NOT NULL REFERENCES hotels(id), room_type TEXT NOT NULL, count INTEGER NOT NULL,
    nightly_rate REAL NOT NULL, PRIMARY KEY (hotel_id, room_type));
CREATE TABLE IF NOT EXISTS hotel_reservations (
    id INTEGER PRIMARY KEY, hotel_id INTEGER NOT NULL REFERENCES hotels(id), room_type TEXT NOT NULL,
    check_in TEXT NOT NULL, nights INTEGER NOT NULL, guest_name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'confirmed');
-- exactly-once writes: the result of each write made under an idempotency key (workflows.demo.tools)
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY, tool TEXT NOT NULL, result TEXT NOT NULL);
"""

# --- seed data (fictional) --------------------------------------------------------------------------

# (name, cuisine, area, price, opens, last seating, table sizes)
RESTAURANTS = [
    ("Trattoria Lumi", "italian", "old_town", "€€", "17:30", "21:30", [2, 4, 4]),
    ("Casa Fiorella", "italian", "riverside", "€€€", "18:00", "22:00", [2, 2, 4, 6, 8]),
    ("Sakura Lane", "japanese", "harbour", "€€€", "18:00", "21:30", [2, 2, 4, 4]),
    ("Kiko Ramen Bar", "japanese", "university", "€", "12:00", "21:00", [2, 2, 2, 4]),
    ("Saffron Court", "indian", "old_town", "€€", "17:00", "22:00", [2, 4, 4, 6]),
    ("Spice Route Canteen", "indian", "university", "€", "12:00", "21:30", [4, 4, 6]),
    ("El Mirador", "mexican", "riverside", "€€", "17:00", "22:30", [2, 4, 4, 8]),
    ("Maison Verte", "french", "old_town", "€€€", "18:30", "21:30", [2, 2, 4]),
    ("Le Petit Quai", "french", "harbour", "€€", "18:00", "22:00", [2, 4, 6]),
    ("The Green Fork", "vegetarian", "university", "€", "11:30", "21:00", [2, 4, 4, 6]),
    ("Harbour Catch", "seafood", "harbour", "€€€", "17:30", "22:00", [2, 4, 4, 6, 10]),
    ("Baan Thai Kitchen", "thai", "riverside", "€€", "17:00", "21:30", [2, 4, 6]),
]

# (id, restaurant, date, time, party size, guest, status) — Trattoria Lumi is full at 19:30 on 2026-12-05.
BOOKINGS = [
    (1001, "Trattoria Lumi", "2026-12-05", "19:30", 2, "Nadia Okafor", "confirmed"),
    (1002, "Trattoria Lumi", "2026-12-05", "19:30", 4, "Tomas Lindqvist", "confirmed"),
    (1003, "Trattoria Lumi", "2026-12-05", "20:00", 3, "Priya Raman", "confirmed"),
    (1004, "Sakura Lane", "2026-12-04", "20:00", 2, "Jonah Weller", "confirmed"),
    (1005, "Casa Fiorella", "2026-12-12", "19:00", 6, "Elena Marsh", "confirmed"),
    (1006, "Harbour Catch", "2026-11-28", "20:30", 4, "Oskar Brandt", "cancelled"),
    (1007, "Maison Verte", "2026-11-27", "19:00", 2, "Amelia Hart", "confirmed"),
    (1008, "El Mirador", "2026-12-18", "21:00", 8, "Lucía Romero", "confirmed"),
    (1009, "Casa Fiorella", "2026-12-19", "19:30", 6, "Grace Osei", "confirmed"),
    (1010, "Casa Fiorella", "2026-12-19", "20:00", 7, "Marek Novak", "confirmed"),
]

# (id, name, email, pin, date of birth, phone, address, locked)
CUSTOMERS = [
    ("C-1001", "Amelia Hart", "amelia.hart@example.com", "4821", "1988-04-12", "+44 7700 900101",
     "14 Willow Row, Northwind NW1 4AB", 0),
    ("C-1002", "Tomas Lindqvist", "tomas.l@example.com", "1357", "1979-11-03", "+44 7700 900102",
     "3 Harbour Steps, Northwind NW7 2CD", 0),
    ("C-1003", "Priya Raman", "priya.raman@example.com", "2468", "1992-07-21", "+44 7700 900103",
     "88 Quarry Lane, Northwind NW3 9EF", 0),
    ("C-1004", "Jonah Weller", "jonah.weller@example.com", "9090", "1985-02-28", "+44 7700 900104",
     "5 Old Mill Court, Northwind NW2 6GH", 1),
    ("C-1005", "Elena Marsh", "elena.marsh@example.com", "3141", "1990-09-09", "+44 7700 900105",
     "21 Chapel Street, Northwind NW5 1JK", 0),
    ("C-1006", "Oskar Brandt", "oskar.brandt@example.com", "7777", "1975-12-30", "+44 7700 900106",
     "9 Lantern Yard, Northwind NW8 3LM", 0),
    ("C-1007", "Nadia Okafor", "nadia.okafor@example.com", "5602", "1995-05-17", "+44 7700 900107",
     "40 Ferry Road, Northwind NW4 8NP", 0),
    ("C-1008", "Lucía Romero", "lucia.romero@example.com", "8264", "1983-03-06", "+44 7700 900108",
     "2 Orchard Close, Northwind NW6 5QR", 0),
]

# (customer, type, balance)
ACCOUNTS = [
    ("C-1001", "checking", 2481.37), ("C-1001", "savings", 12050.00),
    ("C-1002", "checking", 318.90),
    ("C-1003", "checking", 5204.12), ("C-1003", "savings", 800.00),
    ("C-1004", "checking", 77.45),
    ("C-1005", "checking", 1630.00), ("C-1005", "savings", 25400.50),
    ("C-1006", "checking", 9120.66),
    ("C-1007", "checking", 442.08), ("C-1007", "savings", 3100.00),
    ("C-1008", "checking", 2750.25),
]

# (id, customer, last4, kind, status)
CARDS = [
    (1, "C-1001", "4417", "debit", "active"), (2, "C-1001", "9032", "credit", "active"),
    (3, "C-1002", "1180", "debit", "active"), (4, "C-1003", "5526", "debit", "active"),
    (5, "C-1003", "7781", "credit", "blocked"), (6, "C-1004", "3309", "debit", "active"),
    (7, "C-1005", "6045", "debit", "active"), (8, "C-1005", "2290", "credit", "shipping"),
    (9, "C-1006", "8812", "debit", "active"), (10, "C-1007", "0456", "debit", "active"),
    (11, "C-1008", "6671", "credit", "active"),
]

# (id, card, date, merchant, amount)
TRANSACTIONS = [
    ("TX-5001", 1, "2026-11-14", "Northwind Grocers", 54.20),
    ("TX-5002", 1, "2026-11-16", "Cityline Rail", 12.80),
    ("TX-5003", 1, "2026-11-18", "QuickPay*GAMESTORE 88", 249.99),
    ("TX-5004", 1, "2026-11-18", "QuickPay*GAMESTORE 88", 249.99),
    ("TX-5005", 2, "2026-11-10", "Lumen Electronics", 899.00),
    ("TX-5006", 3, "2026-11-12", "Harbour Fuel", 61.35),
    ("TX-5007", 3, "2026-11-19", "Unknown Merchant LTD", 430.00),
    ("TX-5008", 4, "2026-11-02", "Bookhouse Northwind", 23.50),
    ("TX-5009", 7, "2026-11-17", "Aurora Streaming", 13.99),
    ("TX-5010", 7, "2026-11-19", "FX-TRAVEL ONLINE", 1120.00),
    ("TX-5011", 9, "2026-11-15", "Riverside Pharmacy", 18.75),
    ("TX-5012", 10, "2026-11-11", "Saffron Court", 67.40),
    ("TX-5013", 11, "2026-11-13", "El Mirador", 142.10),
]

# (id, email, name, status, placed, delivered, estimated delivery, carrier, tracking, charged times,
#  items [(name, price)])
ORDERS = [
    ("ORD-7001", "amelia.hart@example.com", "Amelia Hart", "processing", "2026-11-18", None, "2026-11-25",
     None, None, 1, [("Linen duvet cover, double", 79.00), ("Pillowcase pair", 24.00)]),
    ("ORD-7002", "amelia.hart@example.com", "Amelia Hart", "delivered", "2026-11-02", "2026-11-06", "2026-11-06",
     "Parcelwise", "PW884120931", 1, [("Trail running shoes, size 39", 119.95)]),
    ("ORD-7003", "tomas.l@example.com", "Tomas Lindqvist", "shipped", "2026-11-15", None, "2026-11-21",
     "Northpost", "NP5512039877", 1, [("Espresso grinder", 189.00)]),
    ("ORD-7004", "tomas.l@example.com", "Tomas Lindqvist", "delivered", "2026-09-20", "2026-09-24",
     "2026-09-24", "Northpost", "NP5512001134", 1, [("Wool scarf", 39.50), ("Leather gloves", 54.00)]),
    ("ORD-7005", "priya.raman@example.com", "Priya Raman", "delivered", "2026-11-08", "2026-11-12", "2026-11-12",
     "Parcelwise", "PW884133310", 2, [("Desk lamp", 45.00)]),
    ("ORD-7006", "priya.raman@example.com", "Priya Raman", "shipped", "2026-11-01", None, "2026-11-07",
     "Parcelwise", "PW884100077", 1, [("Noise-cancelling headphones", 229.00)]),
    ("ORD-7007", "jonah.weller@example.com", "Jonah Weller", "cancelled", "2026-11-10", None, None,
     None, None, 1, [("Board game: Harbour Lights", 42.00)]),
    ("ORD-7008", "elena.marsh@example.com", "Elena Marsh", "returned", "2026-10-25", "2026-10-29", "2026-10-29",
     "Northpost", "NP5511990042", 1, [("Rain jacket, M", 95.00)]),
    ("ORD-7009", "elena.marsh@example.com", "Elena Marsh", "refunded", "2026-10-01", "2026-10-04", "2026-10-04",
     "Northpost", "NP5511870005", 1, [("Yoga mat", 35.00)]),
    ("ORD-7010", "oskar.brandt@example.com", "Oskar Brandt", "processing", "2026-11-19", None, "2026-11-26",
     None, None, 1, [("Cast-iron skillet", 64.00), ("Chef's knife", 89.00)]),
    ("ORD-7011", "nadia.okafor@example.com", "Nadia Okafor", "delivered", "2026-11-13", "2026-11-17",
     "2026-11-17", "Parcelwise", "PW884140021", 1, [("Ceramic vase", 58.00), ("Table runner", 22.00)]),
    ("ORD-7012", "lucia.romero@example.com", "Lucía Romero", "shipped", "2026-11-17", None, "2026-11-23",
     "Northpost", "NP5512077710", 1, [("Bluetooth speaker", 74.99)]),
]


def _seed(conn: sqlite3.Connection) -> None:
    for rid, (name, cuisine, area, price, opens, last, tables) in enumerate(RESTAURANTS, start=1):
        conn.execute("INSERT INTO restaurants VALUES (?,?,?,?,?,?,?)", (rid, name, cuisine, area, price, opens, last))
        conn.executemany("INSERT INTO restaurant_tables (restaurant_id, seats) VALUES (?,?)",
                         [(rid, s) for s in tables])
    rid_of = {r[0]: i for i, r in enumerate(RESTAURANTS, start=1)}
    for bid, rest, day, time, party, guest, status in BOOKINGS:
        # Smallest table that fits and is free under the same 2-hour rule the tools apply.
        taken = busy_tables(conn, rid_of[rest], day, time) if status == "confirmed" else set()
        table = next(t for t, seats in conn.execute(
            "SELECT id, seats FROM restaurant_tables WHERE restaurant_id=? AND seats>=? ORDER BY seats, id",
            (rid_of[rest], party)) if t not in taken)
        conn.execute("INSERT INTO bookings VALUES (?,?,?,?,?,?,?,?)",
                     (bid, rid_of[rest], table, day, time, party, guest, status))
    conn.executemany("INSERT INTO customers VALUES (?,?,?,?,?,?,?,?)", CUSTOMERS)
    conn.executemany("INSERT INTO accounts (customer_id, type, balance) VALUES (?,?,?)", ACCOUNTS)
    conn.executemany("INSERT INTO cards (id, customer_id, last4, kind, status) VALUES (?,?,?,?,?)", CARDS)
    conn.executemany("INSERT INTO card_transactions (id, card_id, date, merchant, amount) VALUES (?,?,?,?,?)",
                     TRANSACTIONS)
    for oid, email, name, status, placed, delivered, eta, carrier, tracking, charged, items in ORDERS:
        total = round(sum(p for _, p in items), 2)
        refunded = total if status == "refunded" else 0.0
        conn.execute("INSERT INTO orders (id, email, customer_name, status, placed_on, delivered_on, "
                     "estimated_delivery, carrier, tracking_number, total, charged_times, refunded) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (oid, email, name, status, placed, delivered, eta, carrier, tracking, total, charged, refunded))
        conn.executemany("INSERT INTO order_items (order_id, name, price, returned) VALUES (?,?,?,?)",
                         [(oid, n, p, int(status in ("returned", "refunded"))) for n, p in items])
    for hid, (name, city, stars, hood, rooms) in enumerate(HOTELS, start=1):
        conn.execute("INSERT INTO hotels VALUES (?,?,?,?,?)", (hid, name, city, stars, hood))
        conn.executemany("INSERT INTO hotel_rooms VALUES (?,?,?,?)",
                         [(hid, rt, n, rate) for rt, (n, rate) in rooms.items()])
    hid_of = {h[0]: i for i, h in enumerate(HOTELS, start=1)}
    conn.executemany("INSERT INTO hotel_reservations (id, hotel_id, room_type, check_in, nights, guest_name) "
                     "VALUES (?,?,?,?,?,?)",
                     [(i, hid_of[h], rt, ci, n, g) for i, h, rt, ci, n, g in HOTEL_RESERVATIONS])
    conn.execute("INSERT INTO meta VALUES ('seed_version', ?)", (SEED_VERSION,))


# (name, city, stars, neighbourhood, {room type: (rooms, nightly rate)})
HOTELS = [
    ("Hotel Azulejo", "lisbon", 4, "Alfama", {"single": (2, 95.0), "double": (4, 140.0), "suite": (1, 260.0)}),
    ("Tagus View Inn", "lisbon", 3, "Cais do Sodré", {"single": (3, 70.0), "double": (5, 105.0)}),
    ("Ribeira Suites", "porto", 4, "Ribeira", {"double": (3, 125.0), "suite": (2, 210.0)}),
    ("Casa do Douro", "porto", 3, "Bonfim", {"single": (2, 60.0), "double": (3, 88.0)}),
    ("Patio Sevilla", "seville", 4, "Santa Cruz", {"single": (1, 85.0), "double": (4, 130.0), "suite": (1, 240.0)}),
    ("Hotel Giralda Garden", "seville", 3, "Arenal", {"double": (2, 98.0)}),
    ("Canal House Amsterdam", "amsterdam", 4, "Grachtengordel",
     {"single": (2, 150.0), "double": (3, 210.0), "suite": (1, 390.0)}),
    ("Hotel Jordaan Loft", "amsterdam", 3, "Jordaan", {"single": (2, 110.0), "double": (2, 165.0)}),
]

# (id, hotel, room type, check-in, nights, guest) — Hotel Giralda Garden's doubles and Patio Sevilla's
# suite are full around 2026-12-10.
HOTEL_RESERVATIONS = [
    (501, "Hotel Giralda Garden", "double", "2026-12-10", 3, "Oskar Brandt"),
    (502, "Hotel Giralda Garden", "double", "2026-12-09", 4, "Elena Marsh"),
    (503, "Ribeira Suites", "suite", "2026-12-20", 5, "Amelia Hart"),
    (504, "Canal House Amsterdam", "suite", "2026-12-30", 3, "Tomas Lindqvist"),
    (505, "Hotel Azulejo", "double", "2026-12-04", 2, "Priya Raman"),
    (506, "Patio Sevilla", "suite", "2026-12-08", 5, "Nadia Okafor"),
]

SEATING_MINUTES = 120  # a booking holds its table this long


def minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def busy_tables(conn: sqlite3.Connection, restaurant_id: int, day: str, time: str,
                exclude_booking: int | None = None) -> set[int]:
    """Tables held by a confirmed booking whose seating overlaps ``time`` on ``day``."""
    rows = conn.execute("SELECT id, table_id, time FROM bookings WHERE restaurant_id=? AND date=? "
                        "AND status='confirmed'", (restaurant_id, day))
    t = minutes(time)
    return {tid for bid, tid, bt in rows if bid != exclude_booking and abs(minutes(bt) - t) < SEATING_MINUTES}


_ensured: set[str] = set()
_ensure_lock = threading.Lock()


def connect(path: str | os.PathLike) -> sqlite3.Connection:
    """Open the database in autocommit mode; callers use explicit ``BEGIN IMMEDIATE`` for writes."""
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def ensure_db(path: str | os.PathLike) -> Path:
    """Create and seed the database at ``path`` unless it already is; safe to call concurrently."""
    path = Path(path)
    key = str(path.resolve())
    if key in _ensured and path.exists():
        return path
    with _ensure_lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path)
        try:
            # The write lock is taken before looking at the marker, so a racing process waits and
            # then sees the seed instead of inserting it a second time.
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Statement by statement: executescript() would COMMIT the lock away.
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                seeded = conn.execute("SELECT value FROM meta WHERE key='seed_version'").fetchone()
                if seeded is not None and seeded[0] != SEED_VERSION:
                    # Demo data from an older release: start over rather than mix two seeds.
                    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                    conn.execute("PRAGMA defer_foreign_keys=ON")
                    for name in tables:
                        conn.execute(f"DELETE FROM {name}")
                    seeded = None
                if seeded is None:
                    _seed(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()
        _ensured.add(key)
    return path


def restore_db(pristine: str | os.PathLike, path: str | os.PathLike) -> None:
    """Overwrite the database at ``path`` with a copy of ``pristine`` (same path, so resources that know
    the path stay valid): fresh tool state for the next session or test case."""
    src, dst = sqlite3.connect(str(pristine)), sqlite3.connect(str(path))
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def table_counts(path: str | os.PathLike) -> dict[str, int]:
    """Row count of every table (used by tests and ``flowdesk`` diagnostics)."""
    conn = connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: conn.execute(f"SELECT COUNT(*) FROM {n}").fetchone()[0] for n in names}
    finally:
        conn.close()
