"""``workbench mcp``'s server: what a person does in the app, as MCP tools with JSON results.

Each tool calls the function the matching CLI command calls and answers what that command's ``--json``
prints. A tool that fails answers an error result (``isError``) with one line; the server keeps serving.
No tool launches a cloud run (``plan_launch`` only plans), and none writes anywhere but the store.
Imported by ``workbench mcp`` only: the ``mcp`` SDK is not loaded by the rest of the CLI.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Callable
from typing import Any

import anyio
import orjson
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent

from workbench.cli.mcp_resources import error_line, list_env_resources, read_env_uri, readme_uri
from workbench.config.redact import redact
from workbench.errors import ConfigError

TOOLS = ("list_environments", "validate_environment", "run_eval", "list_runs", "show_rollout", "search_rollouts",
         "diff_rollouts", "rescore", "plan_launch")
DEFAULT_MAX_ROLLOUTS = 64
INSTRUCTIONS = (
    "Workbench: LLM RL environments. list_environments names them; validate_environment checks one; run_eval "
    "runs a small eval (a few rollouts) and stores it; list_runs, search_rollouts and show_rollout read the "
    "store; diff_rollouts compares two rollouts; rescore re-scores stored rollouts with the current rubric; "
    "plan_launch plans (never starts) a cloud RL run. Resources env://NAME/README.md and env://NAME/files/PATH "
    "hold each environment's files.")

StoreOpener = Callable[[bool], Any]  # read_only_ok -> an open Store
_UNAUTHORIZED = orjson.dumps({"error": "unauthorized: send the token `workbench mcp --http` printed (or "
                                       "$WORKBENCH_MCP_TOKEN) as the header Authorization: Bearer TOKEN"})


def _jsonable(obj: Any) -> dict[str, Any]:
    """``obj`` as plain JSON types (what ``--json`` prints: non-JSON values as strings, NaN as null), with
    every secret this process holds and the credentials of any URL in it redacted (a store written by an
    older version may still hold a key in a URL)."""
    return orjson.loads(redact(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode()))


class _Progress:
    """MCP progress notifications from a synchronous callback, called in the server's loop or in a worker
    thread (sent in order, the same one never twice)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.last: tuple[float, float | None, str | None] | None = None
        self.pending: list[asyncio.Task[None]] = []
        self.loop = asyncio.get_running_loop()

    def __call__(self, done: float, total: float | None, message: str | None = None) -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is not self.loop:
            self.loop.call_soon_threadsafe(self, done, total, message)
            return
        if (done, total, message) == self.last:
            return
        self.last = (done, total, message)
        self.pending.append(self.loop.create_task(self.ctx.report_progress(done, total, message)))

    async def drain(self) -> None:
        await asyncio.gather(*self.pending, return_exceptions=True)


def _sandboxes_on_modal(env: Any, n: int) -> bool:
    """Whether a run of ``env``'s first ``n`` tasks would open sandboxes on Modal (a paid cloud)."""
    from workbench.authoring.environment import needs_sandbox

    if getattr(env.runtime, "kind", "") != "modal":
        return False
    return needs_sandbox(env) or any(t.sandbox is not None for t in env.tasks.take(n))


class BearerAuth:
    """ASGI middleware: every HTTP request carries ``Authorization: Bearer TOKEN`` (compared in constant
    time) or is answered 401 before it reaches the MCP app."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
            scheme, _, value = (sent[0] if len(sent) == 1 else b"").strip().partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                    (b"www-authenticate", b'Bearer realm="workbench mcp"')]})
                await send({"type": "http.response.body", "body": _UNAUTHORIZED})
                return
        await self.app(scope, receive, send)


async def serve_http(server: MCPServer, token: str, port: int, host: str = "127.0.0.1") -> None:
    """Streamable HTTP on ``host:port`` (path /mcp), behind :class:`BearerAuth`. A session lasts until its
    client ends it or the server stops, however long it idles."""
    import uvicorn

    app = BearerAuth(server.streamable_http_app(host=host, session_idle_timeout=None), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()


def discovered_only(env: str) -> str:
    """``env`` when it names a discovered environment (bundled, user, pulled, registered) and nothing
    shadows that name; a path, a module or a name a local folder shadows is refused."""
    from workbench.authoring.discovery import discover, resolve

    refs = {r.name: r for r in discover()}
    if env not in refs or resolve(env) != refs[env]:
        raise ConfigError(f"over HTTP an environment is named, never given as a path or module: {env!r} is not "
                          f"one list_environments names")
    return env


class WorkbenchMCP(MCPServer):
    """MCPServer whose failed tool calls answer one clear line, and whose ``env://`` resources are the
    environments' files (a nested PATH matches too, which MCPServer's templates do not allow)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except (Exception, SystemExit) as e:  # an environment's code may call sys.exit
            return CallToolResult(content=[TextContent(type="text", text=error_line(e, tool=name))], is_error=True)

    async def list_resources(self) -> list[Any]:
        return [*await super().list_resources(), *await anyio.to_thread.run_sync(list_env_resources)]

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        if str(uri).startswith("env://"):
            content, mime = await anyio.to_thread.run_sync(read_env_uri, str(uri))
            return [ReadResourceContents(content=content, mime_type=mime)]
        return await super().read_resource(uri, context)


def build_server(open_store: StoreOpener, *, max_rollouts: int = DEFAULT_MAX_ROLLOUTS,
                 remote: bool = False) -> WorkbenchMCP:
    """The server; ``open_store(read_only_ok)`` opens the store each call uses (and closes after it).
    ``remote`` (HTTP): tools that load code take only discovered environments' names, and no file paths."""
    mcp = WorkbenchMCP("workbench", instructions=INSTRUCTIONS, log_level="WARNING")

    async def in_thread(fn: Callable[[], Any]) -> dict[str, Any]:
        return _jsonable(await anyio.to_thread.run_sync(fn))

    def reading(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with open_store(True) as store:
                return fn(store)
        return run

    # Templates for clients to fill in; WorkbenchMCP.read_resource answers every env:// URI itself.
    @mcp.resource("env://{name}/README.md", name="environment README", mime_type="text/markdown")
    def env_readme(name: str) -> str | bytes:
        return read_env_uri(f"env://{name}/README.md")[0]

    @mcp.resource("env://{name}/files/{path}", name="environment file",
                  description="A file of an environment; env://NAME/files lists them (a / in PATH may be %2F)")
    def env_file(name: str, path: str) -> str | bytes:
        return read_env_uri(f"env://{name}/files/{path}")[0]

    @mcp.tool()
    async def list_environments() -> dict[str, Any]:
        """Every environment Workbench can run (bundled, user, installed) with its origin, version and path;
        one that does not load has an "error". Its README is the resource in "readme"."""

        def run() -> Any:
            from workbench.usecases.environments import list_environments

            rows = []
            for listing in list_environments():
                row = listing.row()
                readme = readme_uri(listing.ref)
                if readme:
                    row["readme"] = readme
                rows.append(row)
            return {"envs": rows}

        return await in_thread(run)

    @mcp.tool()
    async def validate_environment(env: str, args: dict[str, Any] | None = None, sample: int = 20) -> dict[str, Any]:
        """Load ENV (a name, .py file or package directory) with load_environment(**args), check its tasks
        and rubric, score the gold answers and an empty completion on `sample` tasks (no model is called).
        "ok" is false when there are "problems"."""
        from workbench.runs.validate import validate_env

        if sample < 1:
            raise ConfigError("sample must be at least 1")
        if remote:
            env = await anyio.to_thread.run_sync(discovered_only, env)
        # In a worker thread with a loop of its own: loading an environment may take a while (a download).
        report = await anyio.to_thread.run_sync(asyncio.run, validate_env(env, args or {}, sample))
        return _jsonable(report.as_dict())

    @mcp.tool()
    async def run_eval(env: str, ctx: Context, model: str | None = None, base_url: str | None = None, n: int = 8,
                       r: int = 1, args: dict[str, Any] | None = None, concurrency: int = 8,
                       temperature: float | None = None, max_tokens: int | None = None,
                       timeout: float = 300.0) -> dict[str, Any]:
        """Run a small eval of ENV: the first n tasks, r rollouts each, on `model` at `base_url` (an
        OpenAI-compatible endpoint; without one, the embedded default model). Stores the run and answers
        its summary (run_id, mean_reward, pass@k, rewards, errors, tokens, cost), as `workbench eval --json`.
        Refused above the server's rollout cap (n * r). Sends progress as rollouts finish."""
        from workbench.authoring import discovery
        from workbench.runs.evaluate import EvalOptions
        from workbench.usecases.evaluation import run_eval

        if n < 1 or r < 1:
            raise ConfigError("n and r must be at least 1")
        if n * r > max_rollouts:
            raise ConfigError(f"run_eval runs at most {max_rollouts} rollouts (n × r) and {n} × {r} = {n * r} is "
                              f"more; ask for fewer, or run `workbench eval` in a terminal for a large eval")
        if base_url and not (model or os.environ.get("WORKBENCH_MODEL")):
            raise ConfigError("run_eval with a base_url needs the model name too (model)")
        if remote:
            env = await anyio.to_thread.run_sync(discovered_only, env)
        loaded = await anyio.to_thread.run_sync(discovery.load, env, args or {})
        if await anyio.to_thread.run_sync(_sandboxes_on_modal, loaded, n):
            raise ConfigError(f"environment {loaded.name!r} runs its sandboxes on Modal (a paid cloud); run_eval "
                              "does not start them: run `workbench eval` in a terminal")
        opts = EvalOptions(env=env, env_args=args or {}, n=n, rollouts_per_task=r, concurrency=concurrency,
                           model=model, base_url=base_url or os.environ.get("WORKBENCH_BASE_URL") or None,
                           timeout_s=timeout, temperature=temperature, max_tokens=max_tokens)
        progress = _Progress(ctx)
        total: dict[str, int] = {}

        def on_start(run_id: str, count: int) -> None:
            total["n"] = count
            progress(0, count, f"run {run_id}: 0 of {count} rollouts")

        def on_counters(cnt: Any) -> None:
            if "n" in total:
                progress(cnt.finished, total["n"], f"{cnt.finished} of {total['n']} rollouts, {cnt.errors} errors")

        def on_status(what: str, done: int | None, of: int | None) -> None:
            progress(done or 0, of, what)

        if not opts.base_url:  # the embedded model: its first build or start waits in a thread, not in the loop
            opts.validate()
            await anyio.to_thread.run_sync(opts.resolve, on_status)
        store = open_store(False)
        try:
            result = await run_eval(opts, store, on_start=on_start, counters_cb=on_counters, on_status=on_status)
            if "n" in total:  # the last rollouts may finish between two ticks of the counters
                done = result.outcome.counters.finished
                progress(done, total["n"], f"{done} of {total['n']} rollouts")
        finally:
            store.close()
            await progress.drain()
        failure = result.failure(f"show_rollout of {result.run_id}.0.0 has the details")
        if failure is not None:
            raise failure
        return _jsonable(result.summary)

    @mcp.tool()
    async def list_runs(env: str | None = None, limit: int = 30, run: str | None = None,
                        kinds: list[str] | None = None) -> dict[str, Any]:
        """Runs newest first (id, kind, env, model, status, rollouts, errors, mean_reward), as `workbench runs
        --json`: the user's own kinds (eval, train, import, optimize, distill) unless `kinds` names others
        (probe, validate, debug, play, gateway; ["all"] for every kind); a probe's policies are one entry (its
        pipeline id, `members`). With `run`, that run with its training steps and records, as `workbench runs
        RUN --json` (a probe's pipeline id: its policies)."""
        from workbench.usecases.runs import kinds_of, open_pipeline
        from workbench.usecases.runs import list_runs as query

        if limit < 1:
            raise ConfigError("limit must be at least 1")
        wanted = kinds_of(kinds, "list_runs.kinds")

        def one(store: Any) -> Any:
            assert run is not None
            pipeline = open_pipeline(store.conn, run)
            if pipeline is not None:
                return {"pipeline": pipeline}
            found = store.get_run(run)
            steps = store.train_records(found["id"], "step")
            other = [x for x in store.train_records(found["id"]) if x["kind"] != "step"]
            return {"run": found, "steps": steps, "records": other}

        if run is not None:
            return await in_thread(reading(one))
        return await in_thread(reading(lambda store: {"runs": query(store.conn, limit=limit, env=env, kinds=wanted),
                                                      "kinds": list(wanted)}))

    @mcp.tool()
    async def show_rollout(rollout: str) -> dict[str, Any]:
        """One rollout in full (messages, answer, rewards, metrics, model calls, errors, tokens, cost), as
        `workbench show ROLLOUT --json`. Ids look like RUN.TASK.SAMPLE; a unique prefix works."""
        from workbench.store.queries import get_rollout

        return await in_thread(reading(lambda store: get_rollout(store.conn, rollout)))

    @mcp.tool()
    async def search_rollouts(text: str | None = None, run: str | None = None, env: str | None = None,
                              model: str | None = None, min_reward: float | None = None,
                              max_reward: float | None = None, error_kind: str | None = None,
                              source: str | None = None, sort: str = "created", limit: int = 20,
                              offset: int = 0, kinds: list[str] | None = None) -> dict[str, Any]:
        """Stored rollouts matching every filter given, as the app's trace browser finds them: `text` is words
        that must all occur in the messages ("a phrase", prefix*); error_kind a kind, "any" or "none"; source
        model | imported | human; sort created | reward | duration (a leading - reverses). Answers a page of
        summaries (id, run_id, reward, status, preview...) and the total count. Rollouts of the user's own runs
        (eval, train, import, optimize, distill) unless `kinds` names others (["all"] for every kind); with `run`,
        that run's whatever its kind."""
        from workbench.store.queries import RolloutFilter
        from workbench.usecases.runs import kinds_of
        from workbench.usecases.runs import search_rollouts as search

        if not 1 <= limit <= 500:
            raise ConfigError("limit must be from 1 to 500")
        if offset < 0:
            raise ConfigError("offset must not be negative")
        wanted = kinds_of(kinds, "search_rollouts.kinds")

        def run_query(store: Any) -> Any:
            run_id = store.get_run(run)["id"] if run is not None else None
            f = RolloutFilter(env=env, run_id=run_id, model=model, min_reward=min_reward, max_reward=max_reward,
                              error_kind=error_kind, text=text, source=source, sort=sort, kinds=wanted)
            return search(store.conn, f, limit=limit, offset=offset)

        return await in_thread(reading(run_query))

    @mcp.tool()
    async def diff_rollouts(a: str, b: str) -> dict[str, Any]:
        """Two rollouts side by side: messages aligned with changed words marked, scores per function with
        deltas, status, errors, tokens, timing and cost, as `workbench diff A B --json`."""
        from workbench.analysis.diff import load_diff

        return await in_thread(reading(lambda store: load_diff(store.conn, a, b).to_json()))

    @mcp.tool()
    async def rescore(env: str, ctx: Context, run: str | None = None, limit: int | None = None,
                      apply: bool = False, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Re-score the stored rollouts of ENV (or of one run) with its rubric as it is now, without calling
        the model: the reward distribution before and after, what changed, which functions raised, as
        `workbench rescore --json`. With apply, the new scores are stored beside the originals (never
        changing them); otherwise nothing is written."""
        from workbench.analysis.rescore import rescore as run_rescore
        from workbench.authoring.discovery import load_ref, resolve

        if remote:
            env = await anyio.to_thread.run_sync(discovered_only, env)
        ref = await anyio.to_thread.run_sync(resolve, env)
        environment = await anyio.to_thread.run_sync(load_ref, ref, args or {})
        factory = None if args is not None else (lambda a: load_ref(ref, a))
        progress = _Progress(ctx)
        store = open_store(not apply)
        try:
            res = await run_rescore(store, environment, env_for_args=factory, run_id=run, limit=limit, apply=apply,
                                    progress=lambda done, total: progress(done, total))
        finally:
            store.close()
            await progress.drain()
        return _jsonable(res.as_dict())

    @mcp.tool()
    async def plan_launch(env: str, config: str | None = None, overrides: dict[str, Any] | None = None,
                          budget: float | None = None, max_steps: int | None = None) -> dict[str, Any]:
        """Plan an RL run of ENV on a GPU cluster, as `workbench launch ENV --plan --json`: nodes, memory fit,
        step time, $ per step, total cost and how each number was derived. `config` is a run config TOML
        (the train tables plus [cloud]); `overrides` are dotted keys, e.g. {"cloud.nodes": 4}. Launches
        nothing: "launched" is always false; "within_budget" and "budget_problem" say whether
        `workbench launch` would refuse the plan."""
        if remote and config is not None:
            raise ConfigError("over HTTP plan_launch reads no config file; give its keys as overrides")
        if remote:
            env = await anyio.to_thread.run_sync(discovered_only, env)
            if "env.name" in (overrides or {}):
                raise ConfigError("over HTTP the environment is the env argument, not an env.name override")

        def run() -> Any:
            from workbench.training.run_config import parse_overrides
            from workbench.usecases.launch import preflight

            flat: dict[str, Any] = {}
            for key, value in (overrides or {}).items():
                if "." not in key:
                    raise ConfigError(f"override {key!r} is not a dotted key like cloud.nodes or loop.max_steps")
                flat.update(parse_overrides([f"--{key}", value]) if isinstance(value, str) else {key: value})
            if max_steps is not None:
                if max_steps < 1:
                    raise ConfigError("max_steps must be a positive integer")
                flat["loop.max_steps"] = max_steps
            if budget is not None and budget < 0:
                raise ConfigError("budget cannot be negative")
            with open_store(True) as store:
                checked = preflight(store.conn, None, env=env, config_file=config, max_steps=max_steps,
                                    budget_usd=budget, overrides=flat)
            problem = checked.budget_problem
            return {**checked.plan.to_dict(), "launched": False, "within_budget": problem is None,
                    "budget_problem": problem}

        return await in_thread(run)

    return mcp
