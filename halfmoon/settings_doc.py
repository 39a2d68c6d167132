"""docs/settings.md, rendered from the settings' own definitions: ``python -m halfmoon.settings_doc``.

Names, defaults and bounds are read from the code: every ``env_str``/``env_int``/``env_bool``
call with a literal name in any module under ``halfmoon/`` or in ``broker/conf.py`` (its
default resolved through the module's own constants and imports), and every ``BrokerSetting``.
The one-line meaning of an ``env_*`` setting is ``ENTRIES`` below; a setting without one, or an
entry without a setting, is an error. tests/halfmoon/test_settings_doc.py keeps the file equal.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENV_READERS = {"env_str", "env_int", "env_bool"}
# Names no module can resolve to a literal (computed at import), as the doc shows them.
SYMBOLS = {"BASE_DIR": "<project>"}
PASS = {"str", "Path"}  # calls whose value the doc shows as their argument's


@dataclass(frozen=True)
class Entry:
    """How docs/settings.md describes one ``env_*`` setting: its table, unit and meaning."""

    section: str
    unit: str
    meaning: str


@dataclass(frozen=True)
class Definition:
    """One setting as the code defines it."""

    name: str
    default: str
    bounds: str
    where: str


SECTIONS = (
    "Database",
    "Serving",
    "gRPC server",
    "RocketMQ 4.x remoting server",
    "Django, security and sign-in",
    "Alerts and e-mail",
    "Data pipeline",
    "Logs and tests",
)

ENTRIES: dict[str, Entry] = {
    "DATABASE_URL": Entry("Database", "URL", "PostgreSQL only; several hosts for HA (see below)."),
    "HALFMOON_EMBEDDED_POSTGRES_PORT": Entry(
        "Database", "port", "The embedded PostgreSQL's port on 127.0.0.1 (bin/run, bin/test)."
    ),
    "HALFMOON_SERVER": Entry("Database", "-", "`asgi` (connection pool) or `wsgi` (persistent)."),
    "HALFMOON_DB_POOL": Entry("Database", "bool", "Use psycopg's connection pool (ASGI)."),
    "HALFMOON_DB_POOL_MIN": Entry("Database", "connections", "Pool minimum per process."),
    "HALFMOON_DB_POOL_MAX": Entry("Database", "connections", "Pool maximum per process."),
    "HALFMOON_DB_POOL_TIMEOUT": Entry(
        "Database", "s", "Wait for a pooled connection; past it the API answers 503."
    ),
    "HALFMOON_DB_POOL_RECONNECT_TIMEOUT": Entry(
        "Database", "s", "How long the pool retries replacing a lost connection."
    ),
    "HALFMOON_DB_CONNECT_TIMEOUT": Entry(
        "Database", "s", "libpq `connect_timeout` of a new connection; past it 503."
    ),
    "HALFMOON_DB_CONN_MAX_AGE": Entry(
        "Database", "s", "`wsgi` only: lifetime of a process's persistent connection."
    ),
    "HALFMOON_DB_PREPARE_THRESHOLD": Entry(
        "Database", "runs", "Runs before a set-based statement is prepared; 0 turns it off."
    ),
    "REDIS_URL": Entry("Serving", "URL", "Celery's broker, the Channels layer, `/healthz`."),
    "CELERY_BROKER_URL": Entry("Serving", "URL", "Celery's broker (its default: `REDIS_URL`'s)."),
    "HALFMOON_HOST": Entry("Serving", "address", "The web server's address."),
    "HALFMOON_PORT": Entry("Serving", "port", "The web server's port."),
    "HALFMOON_WEB_THREADS": Entry(
        "Serving", "threads", "Threads per web process running the views."
    ),
    "HALFMOON_VAR_DIR": Entry("Serving", "path", "Logs, secret key, static files, archive."),
    "HALFMOON_GRPC_HOST": Entry(
        "gRPC server", "address", "Where the gRPC server listens (unset: `HALFMOON_HOST`)."
    ),
    "HALFMOON_GRPC_ENDPOINT": Entry(
        "gRPC server", "host:port", "The address routes name (unset: its host and port)."
    ),
    "HALFMOON_GRPC_TLS_CERT_FILE": Entry(
        "gRPC server", "path", "PEM certificate chain: with the key, TLS only."
    ),
    "HALFMOON_GRPC_TLS_KEY_FILE": Entry("gRPC server", "path", "PEM key of that certificate."),
    "HALFMOON_GRPC_ALLOW_ANONYMOUS": Entry(
        "gRPC server", "bool", "Accept unsigned calls with an admin key's rights."
    ),
    "HALFMOON_GRPC_THREADS": Entry(
        "gRPC server", "threads", "Threads per gRPC process running the service calls."
    ),
    "HALFMOON_REMOTING_HOST": Entry(
        "RocketMQ 4.x remoting server", "address", "Where it listens (unset: `HALFMOON_HOST`)."
    ),
    "HALFMOON_NAMESRV_PORT": Entry(
        "RocketMQ 4.x remoting server", "port", "The NameServer port 4.x clients are given."
    ),
    "HALFMOON_REMOTING_PORT": Entry(
        "RocketMQ 4.x remoting server", "port", "The broker port (RocketMQ's listenPort)."
    ),
    "HALFMOON_REMOTING_ADVERTISED_ADDRESS": Entry(
        "RocketMQ 4.x remoting server",
        "IPv4:port",
        "The broker address routes name (unset: 127.0.0.1 and the broker port).",
    ),
    "HALFMOON_REMOTING_ALLOW_ANONYMOUS": Entry(
        "RocketMQ 4.x remoting server", "bool", "Serve requests without ACL (none is checked yet)."
    ),
    "HALFMOON_REMOTING_THREADS": Entry(
        "RocketMQ 4.x remoting server", "threads", "Threads per process running the services."
    ),
    "DJANGO_SECRET_KEY": Entry(
        "Django, security and sign-in", "-", "Django's key; the development key is refused."
    ),
    "DJANGO_DEBUG": Entry("Django, security and sign-in", "bool", "Django's debug mode."),
    "DJANGO_ALLOWED_HOSTS": Entry(
        "Django, security and sign-in", "list", "Host names the site answers, comma-separated."
    ),
    "HALFMOON_CHECK_URL_ALLOWED_NETWORKS": Entry(
        "Django, security and sign-in", "list", "CIDRs and host names back-checks may reach."
    ),
    "HALFMOON_LOGIN_FAILURE_LIMIT": Entry(
        "Django, security and sign-in", "attempts", "Failed sign-ins in a row before a lockout."
    ),
    "HALFMOON_LOGIN_COOLOFF_MINUTES": Entry(
        "Django, security and sign-in", "minutes", "Lockout length after the last attempt."
    ),
    "HALFMOON_LOGIN_LOCKOUT_BY": Entry(
        "Django, security and sign-in", "-", "What a lockout is counted by (see below)."
    ),
    "HALFMOON_ALERT_WEBHOOK_ALLOWED_NETWORKS": Entry(
        "Alerts and e-mail", "list", "Where alert webhooks may go (as the check URLs)."
    ),
    "HALFMOON_CONSOLE_URL": Entry(
        "Alerts and e-mail", "URL", "The console as people reach it: links in notifications."
    ),
    "EMAIL_BACKEND": Entry("Alerts and e-mail", "-", "Django's mail backend."),
    "EMAIL_HOST": Entry("Alerts and e-mail", "host", "SMTP server."),
    "EMAIL_PORT": Entry("Alerts and e-mail", "port", "SMTP port."),
    "EMAIL_HOST_USER": Entry("Alerts and e-mail", "-", "SMTP user."),
    "EMAIL_HOST_PASSWORD": Entry("Alerts and e-mail", "-", "SMTP password."),
    "EMAIL_USE_TLS": Entry("Alerts and e-mail", "bool", "SMTP with STARTTLS."),
    "EMAIL_USE_SSL": Entry("Alerts and e-mail", "bool", "SMTP over TLS."),
    "DEFAULT_FROM_EMAIL": Entry("Alerts and e-mail", "address", "Sender of alert e-mails."),
    "HALFMOON_ARCHIVE_URI": Entry(
        "Data pipeline", "path/URI", "Archive and run outputs: a path, file://, s3a://, hdfs://."
    ),
    "HALFMOON_SPARK_MASTER": Entry("Data pipeline", "-", "Spark master of export and reconcile."),
    "HALFMOON_SPARK_DRIVER_MEMORY": Entry("Data pipeline", "JVM size", "The driver JVM's heap."),
    "HALFMOON_LOG_LEVEL": Entry("Logs and tests", "-", "Level of the `halfmoon` logger."),
    "HALFMOON_TEST_DATABASE": Entry(
        "Logs and tests", "-", "The database pytest-django creates and drops."
    ),
}

NOTES = Path(__file__).with_name("settings_notes.md")
"""The notes below the tables (Markdown), longer than a table row can say."""


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _env_call(node: ast.AST) -> ast.Call | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ENV_READERS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node
    return None


def _lookup(path: Path, name: str, depth: int = 0) -> Any:
    """The literal value of the top-level ``name`` of the module at ``path``, following
    imports; raises LookupError when it is not a literal."""
    if depth > 5:
        raise LookupError(name)
    tree = _tree(path)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and stmt.value:
                return _value(stmt.value, path, depth + 1)
        if isinstance(stmt, ast.ImportFrom):
            target = _module_file(_absolute(path, stmt))
            for alias in stmt.names:
                if target is not None and alias.name == "*":
                    try:
                        return _lookup(target, name, depth + 1)
                    except LookupError:
                        continue
                if (alias.asname or alias.name) == name:
                    if target is None:
                        raise LookupError(name)
                    return _lookup(target, alias.name, depth + 1)
    raise LookupError(name)


def _absolute(path: Path, stmt: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` in the module at ``path`` names."""
    if stmt.level == 0:
        return stmt.module or ""
    package = path.relative_to(ROOT).with_suffix("").parts
    package = package[:-1] if package[-1] != "__init__" else package[:-1]
    package = package[: len(package) - (stmt.level - 1)]
    return ".".join([*package, *([stmt.module] if stmt.module else [])])


def _value(node: ast.AST, path: Path, depth: int = 0) -> Any:
    """Evaluate a default expression from literals, constants and the few forms settings use."""
    call = _env_call(node)
    if call is not None:
        return _value(call.args[1], path, depth) if len(call.args) > 1 else ""
    if isinstance(node, ast.Name):
        if node.id in SYMBOLS:
            return SYMBOLS[node.id]
        return _lookup(path, node.id, depth)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            inner = part.value if isinstance(part, ast.FormattedValue) else part
            parts.append(str(_value(inner, path, depth)))
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # a Path: base / "name"
        return f"{_value(node.left, path, depth)}/{_value(node.right, path, depth)}"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _value(node.left, path, depth) * _value(node.right, path, depth)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PASS:
        return str(_value(node.args[0], path, depth))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and isinstance(node.func.value, ast.Constant)
    ):
        return node.func.value.value.join(_value(node.args[0], path, depth))
    return ast.literal_eval(node)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value == "":
        return "unset"
    if isinstance(value, int):
        return str(value)
    return f"`{value}`"


def _bounds(minimum: Any, maximum: Any) -> str:
    if minimum is not None and maximum is not None:
        return f"{minimum}..{maximum}"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def setting_files() -> list[Path]:
    """Where settings are defined: every module under halfmoon/, and broker/conf.py."""
    files = sorted((ROOT / "halfmoon").rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts] + [ROOT / "broker" / "conf.py"]


def env_definitions() -> dict[str, Definition]:
    """Every ``env_*`` setting with a literal name, by name (the first definition wins)."""
    found: dict[str, Definition] = {}
    for path in setting_files():
        for node in ast.walk(_tree(path)):
            call = _env_call(node)
            if call is None:
                continue
            name = call.args[0].value
            keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            default = _value(call.args[1], path) if len(call.args) > 1 else ""
            if call.func.id == "env_bool":
                default = bool(default)
            found.setdefault(
                name,
                Definition(
                    name,
                    _show(default),
                    _bounds(keywords.get("minimum"), keywords.get("maximum")),
                    str(path.relative_to(ROOT)),
                ),
            )
    return found


def render() -> str:
    """The whole of docs/settings.md.

    Raises:
        ValueError: an ``env_*`` setting without an entry in ``ENTRIES``, or the reverse.
    """
    from broker.rules.broker_settings import BROKER_SETTINGS

    found = env_definitions()
    missing = sorted(set(found) - set(ENTRIES))
    stale = sorted(set(ENTRIES) - set(found))
    if missing or stale:
        raise ValueError(f"settings without an entry: {missing}; entries without one: {stale}")
    out = [
        "# Settings",
        "",
        "<!-- Generated by `python -m halfmoon.settings_doc > docs/settings.md` (or `bin/docs`)"
        " from the code; tests/halfmoon/test_settings_doc.py fails when it is stale. -->",
        "",
        "Every setting comes from the environment (or `NAME_FILE`, see the notes below). A value",
        "that does not parse or lies outside its bounds stops the process at start.",
        "",
    ]
    for section in SECTIONS:
        out += [f"## {section}", "", "| variable | default | unit | bounds | meaning |"]
        out.append("| --- | --- | --- | --- | --- |")
        for name in sorted(n for n, e in ENTRIES.items() if e.section == section):
            d, e = found[name], ENTRIES[name]
            out.append(f"| `{name}` | {d.default} | {e.unit} | {d.bounds} | {e.meaning} |")
        out.append("")
    out += [
        "## Broker settings (RocketMQ's names and defaults)",
        "",
        "| variable | RocketMQ name | default | unit | bounds | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in BROKER_SETTINGS:
        out.append(
            f"| `{s.name}` | {s.rocketmq} | {s.default} | {s.unit} | "
            f"{_bounds(s.minimum, s.maximum)} | {s.meaning} |"
        )
    out += ["", NOTES.read_text().rstrip(), ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
