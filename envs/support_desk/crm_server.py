"""A small CRM as an MCP server (stdio): customers, orders, refunds, store credit and policy search.

Every server process builds its own SQLite database from ``crm_seed.json`` in a fresh temporary
folder, so state (refunds, credits) belongs to that process alone and is gone when it exits.
The answers are short on purpose: a small model's context holds the whole conversation.

Run: ``python crm_server.py [--seed crm_seed.json] [--policies policies/]`` (speaks MCP on stdin/stdout).
It needs only the standard library and the official ``mcp`` SDK.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool

HERE = Path(__file__).resolve().parent
SCHEMA = """
CREATE TABLE customers (id TEXT PRIMARY KEY, email TEXT UNIQUE NOT NULL, name TEXT NOT NULL, tier TEXT NOT NULL);
CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id), item TEXT NOT NULL,
                     amount REAL NOT NULL, status TEXT NOT NULL, delivered TEXT, final_sale INTEGER NOT NULL DEFAULT 0);
CREATE TABLE refunds (order_id TEXT PRIMARY KEY REFERENCES orders(id), amount REAL NOT NULL, reason TEXT NOT NULL);
CREATE TABLE credits (id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id),
                      amount REAL NOT NULL, reason TEXT NOT NULL);
"""
_WORD = re.compile(r"[a-z0-9$]+")
_STOP = frozenset({"a", "an", "the", "and", "or", "of", "to", "for", "in", "on", "is", "are", "do", "does", "can",
                   "i", "my", "me", "we", "you", "it", "what", "how", "when"})


def _words(text: str) -> set[str]:
    out = set()
    for w in _WORD.findall(text.lower()):
        if w not in _STOP:
            out.add(w[:-1] if len(w) > 3 and w.endswith("s") else w)
    return out


class CRM:
    """The database behind the tools: one SQLite file in a temporary folder of this process. A request it
    refuses raises ``ToolError``, whose message the model reads."""

    def __init__(self, seed: Path, policies: Path) -> None:
        data = json.loads(seed.read_text())
        self.today = dt.date.fromisoformat(data["today"])
        self.folder = Path(tempfile.mkdtemp(prefix="crm-"))
        atexit.register(shutil.rmtree, self.folder, True)
        self.db = sqlite3.connect(self.folder / "crm.db", isolation_level=None)
        self.db.row_factory = sqlite3.Row
        # A throwaway database: no fsync, the journal in memory (seeding it took 40 ms of disk syncs).
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA journal_mode=MEMORY")
        self.db.executescript(SCHEMA)
        self.db.execute("BEGIN")
        with self.db:
            self.db.executemany("INSERT INTO customers VALUES (:id, :email, :name, :tier)",
                                [{k: c[k] for k in ("id", "email", "name", "tier")} for c in data["customers"]])
            self.db.executemany(
                "INSERT INTO orders VALUES (:id, :customer_id, :item, :amount, :status, :delivered, :final_sale)",
                [{**o, "delivered": o.get("delivered"), "final_sale": int(bool(o.get("final_sale")))}
                 for o in data["orders"]])
            self.db.executemany("INSERT INTO refunds VALUES (:order_id, :amount, :reason)", data.get("refunds", []))
            self.db.executemany("INSERT INTO credits (customer_id, amount, reason) VALUES (:customer_id, :amount, :reason)",
                                data.get("credits", []))
        # Policy snippets: one per bullet or paragraph, tagged with its document's name.
        self.snippets: list[tuple[str, str, set[str]]] = []
        for doc in sorted(policies.glob("*.md")):
            title = doc.stem
            for line in doc.read_text().splitlines():
                line = line.strip()
                if line.startswith("# "):
                    title = line[2:].strip()
                elif line:
                    text = line.lstrip("-* ").strip()
                    self.snippets.append((title, text, _words(f"{title} {text}")))

    def customer(self, email: str) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM customers WHERE lower(email) = lower(?)", (email.strip(),)).fetchone()
        if row is None:
            raise ToolError(f"no customer with email {email!r}")
        return {"id": row["id"], "name": row["name"], "tier": row["tier"], "store_credit": self.credit(row["id"])}

    def credit(self, customer_id: str) -> float:
        row = self.db.execute("SELECT coalesce(sum(amount), 0) FROM credits WHERE customer_id = ?",
                              (customer_id,)).fetchone()
        return round(float(row[0]), 2)

    def _order(self, row: sqlite3.Row) -> dict[str, Any]:
        o = {"id": row["id"], "item": row["item"], "amount": row["amount"], "status": row["status"]}
        if row["delivered"]:
            o["days_ago"] = (self.today - dt.date.fromisoformat(row["delivered"])).days
        if row["final_sale"]:
            o["final_sale"] = True
        return o

    def orders(self, customer_id: str) -> list[dict[str, Any]]:
        cid = customer_id.strip().upper()
        if self.db.execute("SELECT 1 FROM customers WHERE id = ?", (cid,)).fetchone() is None:
            raise ToolError(f"no customer with id {customer_id!r}; find_customer gives the id")
        return [self._order(r) for r in self.db.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY id", (cid,))]

    def order(self, order_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM orders WHERE id = ?", (order_id.strip().upper(),)).fetchone()
        if row is None:
            raise ToolError(f"no order {order_id!r}")
        o = {**self._order(row), "customer_id": row["customer_id"]}
        refund = self.db.execute("SELECT amount, reason FROM refunds WHERE order_id = ?", (row["id"],)).fetchone()
        o["refund"] = dict(refund) if refund else None
        return o

    def refund(self, order_id: str, reason: str) -> dict[str, Any]:
        o = self.order(order_id)
        if o["refund"] is not None or o["status"] == "refunded":
            raise ToolError(f"order {o['id']} is already refunded")
        with self.db:
            self.db.execute("INSERT INTO refunds VALUES (?, ?, ?)", (o["id"], o["amount"], reason.strip() or "-"))
            self.db.execute("UPDATE orders SET status = 'refunded' WHERE id = ?", (o["id"],))
        return {"order_id": o["id"], "refunded": o["amount"], "status": "refunded"}

    def store_credit(self, customer_id: str, amount: float, reason: str) -> dict[str, Any]:
        cid = customer_id.strip().upper()
        if self.db.execute("SELECT 1 FROM customers WHERE id = ?", (cid,)).fetchone() is None:
            raise ToolError(f"no customer with id {customer_id!r}")
        if not 0 < amount <= 10_000:
            raise ToolError("amount must be positive")
        with self.db:
            self.db.execute("INSERT INTO credits (customer_id, amount, reason) VALUES (?, ?, ?)",
                            (cid, round(amount, 2), reason.strip() or "-"))
        return {"customer_id": cid, "credited": round(amount, 2), "store_credit": self.credit(cid)}

    def search(self, query: str, k: int = 2) -> list[str]:
        q = _words(query)
        scored = [(len(q & words), i) for i, (_, _, words) in enumerate(self.snippets)]
        best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:k]
        return [f"{self.snippets[i][0]}: {self.snippets[i][1]}" for _, i in best]


def _money(x: float) -> str:
    return f"${x:g}" if x == int(x) else f"${x:.2f}"


def _order_line(o: dict[str, Any]) -> str:
    status = o["status"]
    if "days_ago" in o:
        status = ("" if status == "delivered" else f"{status}, ") + f"delivered {o['days_ago']} days ago"
    return f"{o['id']} {o['item']} {_money(o['amount'])}: {status}{', final sale' if o.get('final_sale') else ''}"


def _result(data: dict[str, Any], text: str) -> CallToolResult:
    """Short text for the model; the same facts as structured content for programs (the rubric)."""
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _strip_titles(schema: Any) -> Any:
    """The JSON schema without pydantic's generated ``title`` keys (tokens a small model cannot spare)."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


class CompactMCP(MCPServer):
    async def list_tools(self) -> list[Tool]:
        tools = await super().list_tools()
        for t in tools:
            t.input_schema = _strip_titles(t.input_schema)
        return tools


def build_server(seed: Path = HERE / "crm_seed.json", policies: Path = HERE / "policies") -> MCPServer:
    crm = CRM(seed, policies)
    server = CompactMCP("crm", log_level="WARNING")
    # The tools are coroutines: they run one at a time in the server's thread, which owns the database
    # connection (the SDK runs plain functions in worker threads).

    @server.tool()
    async def find_customer(email: str) -> CallToolResult:
        """Look up a customer by email."""
        c = crm.customer(email)
        return _result(c, f"{c['id']} {c['name']}, {c['tier']} tier, store credit {_money(c['store_credit'])}")

    @server.tool()
    async def list_orders(customer_id: str) -> CallToolResult:
        """List a customer's orders."""
        orders = crm.orders(customer_id)
        return _result({"orders": orders}, "\n".join(_order_line(o) for o in orders) or "No orders.")

    @server.tool()
    async def get_order(order_id: str) -> CallToolResult:
        """Show one order and its refund."""
        o = crm.order(order_id)
        r = o["refund"]
        return _result(o, _order_line(o) + (f"; refunded {_money(r['amount'])} ({r['reason']})" if r else ""))

    @server.tool()
    async def search_policy(query: str) -> CallToolResult:
        """Search the store policy."""
        hits = crm.search(query)
        return _result({"results": hits}, "\n".join(hits) or "No match; try refund, gold, damaged, shipping.")

    @server.tool()
    async def issue_refund(order_id: str, reason: str) -> CallToolResult:
        """Refund an order in full."""
        r = crm.refund(order_id, reason)
        return _result(r, f"Refunded {_money(r['refunded'])} for order {r['order_id']}.")

    @server.tool()
    async def issue_store_credit(customer_id: str, amount: float, reason: str) -> CallToolResult:
        """Give a customer store credit."""
        r = crm.store_credit(customer_id, amount, reason)
        return _result(r, f"Gave {_money(r['credited'])} store credit to {r['customer_id']}.")

    return server


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="The support_desk CRM as an MCP server over stdio.")
    ap.add_argument("--seed", type=Path, default=HERE / "crm_seed.json", help="the seed data (JSON)")
    ap.add_argument("--policies", type=Path, default=HERE / "policies", help="a folder of policy .md files")
    a = ap.parse_args(argv)
    build_server(a.seed, a.policies).run()


if __name__ == "__main__":
    main()
