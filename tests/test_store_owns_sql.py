"""The store owns its SQL: outside ``workbench/store/`` no product module runs a statement on a
connection (``.execute``, ``.executemany``, ``.executescript``) or holds SQL text; the commands, the
app and the runtimes call the store's query functions (``workbench/store/*.py``) instead. Found by
reading each module's syntax tree, so a statement built with an f-string is found as well."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The product's code, by folder; the store's own folder is where SQL lives.
SCANNED = ("workbench", "app", "local_runtime", "cloud_runtime", "envs")
STORE = Path("workbench/store")
EXECUTE = frozenset({"execute", "executemany", "executescript"})
#: A statement, as SQL writes it (upper-case keywords): prose such as "select a model" never matches.
SQL = re.compile(r"\b(SELECT\b[\s\S]+?\bFROM|INSERT\s+(OR\s+[A-Z]+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
                 r"CREATE\s+(UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX|TRIGGER|VIEW)|DROP\s+(TABLE|INDEX)|ALTER\s+TABLE|"
                 r"PRAGMA\s+\w+|BEGIN\s+IMMEDIATE)\b")

#: Modules allowed SQL outside the store, each with its reason.
ALLOWED = {
    # An environment's own data, not Workbench's store: the support desk's CRM is a SQLite database the
    # environment's MCP server creates and queries inside each rollout's sandbox.
    "envs/support_desk/crm_server.py": "an environment's own CRM database, not the store",
}


def _text(node: ast.AST) -> str | None:
    """The literal text of a string constant, or of an f-string's literal parts (its fields as ``?``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
                       for v in node.values)
    return None


def violations(root: Path, folders: tuple[str, ...] = SCANNED, allowed: dict[str, str] | None = None) -> list[str]:
    """``path:line: what`` for every statement run or SQL text outside the store under ``root``."""
    allowed = ALLOWED if allowed is None else allowed
    found: list[str] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.is_relative_to(STORE) or rel.as_posix() in allowed:
                continue
            tree = ast.parse(path.read_text(), filename=str(rel))
            in_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in EXECUTE:
                    found.append(f"{rel}:{node.lineno}: .{node.func.attr}(...) on a connection")
                elif id(node) not in in_fstring and (text := _text(node)) is not None and SQL.search(text):
                    found.append(f"{rel}:{node.lineno}: SQL text {text.strip()[:60]!r}")
    return found


def test_no_sql_outside_the_store() -> None:
    found = violations(ROOT)
    assert not found, ("SQL outside workbench/store/ (put it in a query function of the store, by concern, and "
                       "call that):\n" + "\n".join(found))


def test_every_allowed_module_exists_and_still_needs_its_entry() -> None:
    for rel in ALLOWED:
        assert (ROOT / rel).is_file(), f"{rel} is on the allow-list but does not exist"
        assert violations(ROOT, (str(Path(rel).parent),), allowed={}), f"{rel} holds no SQL: drop its entry"


def test_a_planted_statement_is_found(tmp_path: Path) -> None:
    """Each way of writing SQL outside the store is found; the same code inside the store is not."""
    for folder in ("workbench/runs", "app/screens", "cloud_runtime", STORE.as_posix()):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "workbench/runs/planted.py").write_text(
        "def f(store, table):\n"
        "    store.conn.execute('SELECT 1')\n"
        "    store.conn.executemany('x', [])\n"
        "    return f'SELECT COUNT(*) FROM {table} WHERE run_id = ?'\n")
    (tmp_path / "app/screens/planted.py").write_text(
        "Q = '''UPDATE run\n   SET status = ? WHERE id = ?'''\n"
        "HELP = 'Select a run from the list, then update it'\n")  # prose, not SQL
    (tmp_path / "cloud_runtime/planted.py").write_text("def g(c):\n    c.executescript('CREATE TABLE t (x)')\n")
    (tmp_path / STORE / "planted.py").write_text("def h(c):\n    return c.execute('SELECT id FROM run')\n")
    found = violations(tmp_path, ("workbench", "app", "cloud_runtime"), allowed={})
    assert sorted({line.split(": ", 1)[0] for line in found}) == [
        "app/screens/planted.py:1", "cloud_runtime/planted.py:2", "workbench/runs/planted.py:2",
        "workbench/runs/planted.py:3", "workbench/runs/planted.py:4"], found
