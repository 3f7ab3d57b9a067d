"""Shared CLI pieces: consoles, store opening, JSON output, running a coroutine, the shared flags (hot swaps,
``--env-args``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
import orjson

from workbench.format import SafeConsole

# Every command prints through these: a control character from data reaching them is shown, not obeyed.
console = SafeConsole(highlight=False, soft_wrap=True)
console_err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)


def open_store(ctx: click.Context, db: str | None = None, *, read_only_ok: bool = False,
               existing: bool = False) -> Any:
    """The command's store. ``read_only_ok`` (commands that only read): a store this process cannot write
    is opened read-only instead of refused. ``existing``: a named store (``--db``, ``WORKBENCH_DB``) that is not
    there is refused, not created (the commands that only read it: nothing to read means a wrong --db);
    Workbench's own default store is created on first use, so a fresh install lists no runs and the
    default prices."""
    from workbench.store.opening import open_store as open_at

    named = db or (ctx.find_root().obj or {}).get("db")
    if not named:  # the default store, never a WORKBENCH_DB the command's own --db did not take up
        from workbench.config.paths import default_db

        named = default_db()
        existing = False
    return open_at(named, read_only_ok=read_only_ok, existing=existing)


def emit_json(obj: Any) -> None:
    """Print one JSON object as the last line of stdout."""
    from workbench.config.redact import (
        redact,  # a key in a URL (a store of an older version) is never printed
    )

    sys.stdout.write(redact(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str).decode()) + "\n")
    sys.stdout.flush()


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--db PATH`` (or ``WORKBENCH_DB``): the store every command reads and writes."""
    return click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file (default: XDG data dir).")(f)


JSON_HELP = "Print one JSON object as the last line of stdout."


def json_option(help: str = JSON_HELP) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--json``: one JSON object as the last line of stdout (the machine-readable contract)."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def no_credentials(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--*-base-url`` option's check: a URL holding a credential (``user:password@``, ``?key=...``) is
    refused before the command starts, since URLs are stored and printed."""
    if value:
        from workbench.config.redact import check_url

        check_url(value, f"--{(param.name or '').replace('_', '-')}", "a URL is stored and printed, so pass the "
                  "key with --api-key or WORKBENCH_API_KEY (or `workbench models add NAME --api-key-env VAR`)")
    return value


def model_options(f: Callable[..., Any] | None = None, *, several: bool = False) -> Any:
    """The hot-swap flags every command that runs rollouts takes (``several``: ``-m`` may repeat)."""
    if f is None:
        return lambda g: model_options(g, several=several)
    model = click.option("-m", "--model", multiple=True, help="Model name or a registered model (`workbench "
                         "models`); repeat it to run the same tasks on several models (default: the embedded "
                         "model).") if several else \
        click.option("-m", "--model", default=None, help="Model name or a registered model (`workbench models`) "
                     "(default: the embedded model).")
    opts = [
        model,
        click.option("--base-url", default=None, envvar="WORKBENCH_BASE_URL", callback=no_credentials,
                     help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (default: embedded server)."),
        click.option("--api-key", default=None, help="API key (else WORKBENCH_API_KEY, then OPENAI_API_KEY, or for api.anthropic.com "
                     "ANTHROPIC_API_KEY, then for those two APIs the `workbench login` token)."),
        click.option("--harness", default=None, help="Swap the harness: module:Name or file.py:Name."),
        click.option("--runtime", default=None, help="Swap the runtime: local | docker[:IMAGE] | modal, or an "
                     "installed runtime plugin's name."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


ENV_ARGS_HELP = "JSON keyword arguments for load_environment."


def env_args_option(help: str = ENV_ARGS_HELP) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-a/--env-args JSON``: keyword arguments for the environment's ``load_environment`` (the command
    parses them with ``discovery.parse_env_args``). Every command that loads an environment declares it here."""
    return click.option("-a", "--env-args", "env_args", default=None, help=help)


#: After SIGTERM or Ctrl-C, how long a command whose event loop took the cancellation has to wind down
#: (cancel its rollouts, close its sandboxes and its writer, stop a trainer's processes, record how the run
#: ended) before it is interrupted wherever it is: a backstop, as each of those steps is bounded itself.
STOP_GRACE_S = 30.0


def run_async(coro: Any) -> Any:
    """Run a coroutine; the first SIGTERM or Ctrl-C cancels it cleanly (what is written stays written).

    The signal's handler runs in the main thread whatever it is doing, the event loop or code that
    never yields to it (an environment building its tasks): it cancels the coroutine through the loop.
    Where the loop has not taken that up a second later (it is blocked), or the command is still
    running ``STOP_GRACE_S`` later, or at a second signal, ``KeyboardInterrupt`` is raised where the
    main thread is."""
    import _thread
    import asyncio
    import signal
    import threading

    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        loop = runner.get_loop()
        task: Any = None
        signals = 0
        timers: list[threading.Timer] = []

        cancelled = threading.Event()

        def cancel() -> None:
            cancelled.set()
            if task is not None:
                task.cancel()

        def interrupt_if_stuck() -> None:
            if not cancelled.is_set():  # the loop has not run since: the main thread is in code that never yields
                _thread.interrupt_main()

        def on_signal(signum: int, frame: Any) -> None:
            nonlocal signals
            signals += 1
            if signals > 1:
                raise KeyboardInterrupt
            loop.call_soon_threadsafe(cancel)
            for delay, then in ((1.0, interrupt_if_stuck), (STOP_GRACE_S, _thread.interrupt_main)):
                timer = threading.Timer(delay, then)
                timer.daemon = True
                timer.start()
                timers.append(timer)

        async def main() -> Any:
            nonlocal task
            task = asyncio.current_task()
            return await coro

        previous = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread
            pass
        try:
            return runner.run(main())
        finally:
            for timer in timers:
                timer.cancel()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
