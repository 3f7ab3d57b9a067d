"""``workbench gateway``: a real OpenAI and a real Anthropic SDK client, with a gateway key, through the gateway
to two registered models (scripted mock servers that insist on the provider's key), every exchange recorded in
the store without the provider's key or the personal data in it. Real processes, HTTP on 127.0.0.1, SQLite."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import PROVIDER_KEY, Running, post, rows_of, store_bytes
from tests.helpers import assert_user_error, last_json


def test_both_sdks_hold_conversations_through_the_gateway_and_each_exchange_is_recorded(
        registered: str, gateway: Callable[..., Running], store_path: Path) -> None:
    import anthropic
    import openai

    gw = gateway("--route", "support=good:0.8,cand:0.2")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    history = [{"role": "user", "content": "hello, mail me at jane.doe@example.com"}]
    raw = oa.chat.completions.with_raw_response.create(model="support", messages=history)  # type: ignore[arg-type]
    first = raw.parse()
    assert raw.headers["X-Workbench-Arm"] in ("good", "cand") and raw.headers["X-Workbench-Response-Id"]
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "and the second turn"}]
    second = oa.chat.completions.create(model="support", messages=history)  # type: ignore[arg-type]
    assert "second turn" in (second.choices[0].message.content or "")  # the echo mock answers the last turn

    chunks = list(oa.chat.completions.create(model="support", stream=True,  # type: ignore[call-overload]
                                             messages=[{"role": "user", "content": "stream this"}]))
    assert "stream this" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    resp = oa.responses.create(model="support", input="through the responses api")
    assert "through the responses api" in resp.output_text

    an = anthropic.Anthropic(base_url=gw.root, api_key=registered, max_retries=0)
    turns = [{"role": "user", "content": "bonjour"}]
    raw_msg = an.messages.with_raw_response.create(model="support", max_tokens=64, messages=turns)  # type: ignore[arg-type]
    msg = raw_msg.parse()
    assert raw_msg.headers["X-Workbench-Arm"] in ("good", "cand")
    turns += [{"role": "assistant", "content": msg.content[0].text},  # type: ignore[union-attr]
              {"role": "user", "content": "encore"}]
    assert "encore" in an.messages.create(model="support", max_tokens=64, messages=turns).content[0].text  # type: ignore[arg-type, union-attr]

    err = gw.stop()
    assert "6 served, 6 recorded, 0 dropped" in err, err
    rows = rows_of(store_path)
    assert len(rows) == 6 and {r["source"] for r in rows} == {"traffic"} and {r["run_kind"] for r in rows} == {"gateway"}
    # each two-turn conversation is one session (prefix continuity): the same task index, calls 0 and 1
    by_session: dict[str, list[int]] = {}
    for r in rows:
        by_session.setdefault(json.loads(r["state"])["session"], []).append(r["sample_index"])
    assert sorted(len(v) for v in by_session.values()) == [1, 1, 2, 2]
    assert all(sorted(v) == list(range(len(v))) for v in by_session.values())
    data = store_bytes(store_path)
    assert PROVIDER_KEY.encode() not in data and registered.encode() not in data
    assert b"jane.doe@example.com" not in data and b"[redacted:email]" in data
    assert {json.loads(r["state"])["arm"] for r in rows} <= {"good", "cand"}


@pytest.mark.parametrize(("share", "n"), [(0.1, 1000), (0.2, 200)], ids=["0.1 of 1000", "0.2 of 200"])
def test_a_split_route_serves_each_arm_its_share(registered: str, gateway: Callable[..., Running], share: float,
                                                 n: int) -> None:
    import openai

    gw = gateway("--route", f"support=good:{1 - share:g},cand:{share:g}", "--record-rate", "0")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    arms = [oa.chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": f"call {i}"}]).headers["X-Workbench-Arm"]
        for i in range(n)]
    cand = arms.count("cand")
    sd = math.sqrt(n * share * (1 - share))
    assert abs(cand - n * share) < 4.5 * sd, cand  # within binomial bounds (4.5 sd: about 1 in 150,000 fails)
    assert arms.count("good") + cand == n


def test_a_wrong_or_revoked_key_is_a_401_in_each_apis_own_shape(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str]) -> None:
    import anthropic
    import openai

    gw = gateway("--route", "support=good")
    for key in ("wbg_00000000_" + "x" * 43, PROVIDER_KEY, registered[:-1] + "Z"):
        with pytest.raises(openai.AuthenticationError) as oe:
            openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0).chat.completions.create(
                model="support", messages=[{"role": "user", "content": "hi"}])
        assert oe.value.status_code == 401 and "gateway key" in str(oe.value)
        with pytest.raises(anthropic.AuthenticationError) as ae:
            anthropic.Anthropic(base_url=gw.root, api_key=key, max_retries=0).messages.create(
                model="support", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert ae.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    ok = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    assert ok.chat.completions.create(model="support", messages=[{"role": "user", "content": "hi"}]).choices
    assert cli("gateway", "keys", "revoke", "shop", env=env).rc == 0
    with pytest.raises(openai.AuthenticationError):  # refused from the next request on, without a restart
        ok.chat.completions.create(model="support", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=gw.base_url, api_key=cli("gateway", "keys", "add", "shop", "--json", env=env)
                      .stdout.split('"key":"')[1].split('"')[0], max_retries=0).chat.completions.create(
            model="no-such-route", messages=[{"role": "user", "content": "hi"}])


#: (the gateway's arguments, what its one line says)
BAD = [
    (("--route", "support=nobody"), "no model named 'nobody' is registered"),
    (("--route", "support=good:0.5,cand:0.4"), "the weights add up to 0.9, not 1"),
    (("--route", "support=good:0.5,good:0.5"), "good is named twice"),
    (("--route", "support=good:1.5"), "must be a number in (0, 1]"),
    (("--route", "support=good:x"), "no model named 'good:x' is registered; did you mean 'good'?"),
    (("--route", "support"), "write NAME=MODEL"),
    ((), "the gateway needs a route"),
    (("--route", "support=good", "--record-rate", "2"), "--record-rate 2"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[" ".join(a) or "no route" for a, _ in BAD])
def test_a_bad_route_is_one_line_before_anything_serves(registered: str, cli: Callable[..., Any],
                                                        env: dict[str, str], args: tuple[str, ...],
                                                        fragment: str) -> None:
    assert_user_error(cli("gateway", "--port", "0", *args, env=env, timeout=60), fragment)


def test_a_port_in_use_is_one_line(registered: str, gateway: Callable[..., Running], cli: Callable[..., Any],
                                   env: dict[str, str]) -> None:
    gw = gateway("--route", "support=good")
    port = str(gw.info["port"])
    assert_user_error(cli("gateway", "--port", port, "--route", "support=good", env=env, timeout=60),
                      f"cannot listen on 127.0.0.1:{port}")


#: (a feedback body, the field its 400 names)
BAD_FEEDBACK = [
    ({"score": 1.0}, "response_id"),
    ({"response_id": "gwr-x", "session": "s", "score": 1.0}, "response_id"),
    ({"response_id": "gwr-x"}, "score"),
    ({"response_id": "gwr-x", "score": "good"}, "score"),
    ({"response_id": "gwr-x", "score": True}, "score"),
    ({"response_id": 7, "score": 1.0}, "response_id"),
    ({"response_id": "gwr-x", "score": 1.0, "stars": 5}, "stars"),
    ({"response_id": "gwr-x", "comment": "x" * 10_001}, "comment"),
    ([1, 2], None),
]


def test_feedback_is_kept_for_an_answer_or_a_session_this_app_was_served(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        store_path: Path) -> None:
    import openai

    gw = gateway("--route", "support=good")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0,
                       default_headers={"X-Workbench-Session": "ticket-17"})
    raw = oa.chat.completions.with_raw_response.create(model="support", messages=[{"role": "user", "content": "hi"}])
    rid = raw.headers["X-Workbench-Response-Id"]
    feedback = f"{gw.root}/v1/feedback"
    assert post(feedback, registered, {"response_id": rid, "score": 1.0, "label": "thumbs_up"}) == (200, {"ok": True, "id": 1})
    status, out = post(feedback, registered, {"session": "ticket-17", "score": 0.5, "comment": "resolved"})
    assert status == 200 and out["ok"], out
    for body, field in BAD_FEEDBACK:
        status, out = post(feedback, registered, body)
        assert status == 400 and out["error"]["param"] == field and "\n" not in out["error"]["message"], (body, out)
    assert post(feedback, registered, {"response_id": "gwr-unknown", "score": 1.0})[0] == 404
    assert post(feedback, registered, {"session": "never-named", "score": 1.0})[0] == 404
    other = last_json(cli("gateway", "keys", "add", "other-app", "--json", env=env).stdout)["key"]
    assert post(feedback, other, {"response_id": rid, "score": 0.0})[0] == 404  # not this app's answer
    assert post(feedback, "wbg_00000000_" + "x" * 43, {"response_id": rid, "score": 0.0})[0] == 401
    gw.stop()
    conn = sqlite3.connect(store_path)
    try:
        kept = conn.execute("SELECT response_id, session, app, score, label, comment FROM feedback ORDER BY id").fetchall()
    finally:
        conn.close()
    assert kept == [(rid, None, "shop", 1.0, "thumbs_up", ""), (None, "ticket-17", "shop", 0.5, "", "resolved")]
    shown = cli("show", rid, env=env)  # the trace shows it beside the answer
    assert shown.rc == 0, shown.stderr
    assert "feedback on this answer score 1 thumbs_up" in shown.stdout
    assert "feedback on session ticket-17 score 0.5: resolved" in shown.stdout
    as_json = last_json(cli("show", rid, "--json", env=env).stdout)
    assert [f["label"] or f["comment"] for f in as_json["feedback"]] == ["thumbs_up", "resolved"]


def test_traffic_with_feedback_becomes_an_environment_that_eval_runs(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str],
        tmp_path: Path) -> None:
    import openai

    gw = gateway("--route", "support=good")
    feedback = f"{gw.root}/v1/feedback"

    def ask(session: str, messages: list[dict[str, str]]) -> str:
        oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0,
                           default_headers={"X-Workbench-Session": session})
        raw = oa.chat.completions.with_raw_response.create(model="support", messages=messages)  # type: ignore[arg-type]
        return str(raw.headers["X-Workbench-Response-Id"])

    first = [{"role": "user", "content": "my order 1042 never arrived"}]
    ask("a", first)  # no feedback of its own or its session's: below any minimum
    a2 = ask("a", [*first, {"role": "assistant", "content": "sorry"}, {"role": "user", "content": "refund it please"}])
    b = ask("b", [{"role": "user", "content": "How do I reset my password on the mobile app?"}])
    c = ask("c", [{"role": "user", "content": "cancel my subscription"}])
    d = ask("d", [{"role": "user", "content": "how do i reset my password on the mobile app"}])  # b, near enough
    for rid, score in ((a2, 1.0), (b, 0.9), (c, 0.0), (d, 0.8)):
        assert post(feedback, registered, {"response_id": rid, "score": score})[0] == 200
    gw.stop()

    out = tmp_path / "support_tasks"
    made = cli("tasks", "from-traffic", out, "--app", "shop", "--min-feedback", "0.5", "--held-out", "0.5",
               "--judge", "good", "--json", env=env)
    assert made.rc == 0, made.stderr
    got = last_json(made.stdout)
    assert got["path"] == str(out) and (got["exchanges"], got["below_feedback"], got["duplicates"]) == (5, 2, 1)
    assert (got["tasks"], got["sessions"], got["held_out_sessions"], got["train"], got["held_out"]) == (2, 2, 1, 1, 1)
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert {r["info"]["response_id"] for r in rows} == {a2, b}  # d was b's near-duplicate with worse feedback
    assert [r["info"]["split"] for r in rows] == ["train", "held_out"]  # held out last
    a_row = next(r for r in rows if r["info"]["response_id"] == a2)
    assert a_row["prompt"][-1] == {"role": "user", "content": "refund it please"} and a_row["answer"]
    assert "held-out tasks from" in (out / "README.md").read_text()
    ran = cli("eval", out, "-m", "good", "-n", 2, "--json", env=env, timeout=300)
    assert ran.rc == 0, ran.stderr
    result = last_json(ran.stdout)
    assert result["rollouts"] == 2 and result["failed"] == 0 and result["errors"] == 0, result


#: (arguments of tasks from-traffic, what its one line says)
#: Rubric files ``--rubric {name}`` may name in the table below.
RUBRIC_FILES = {
    "no_rubric.py": "X = 1\n",
    "raises.py": "raise RuntimeError('half-written')\n",
    "metric_only.py": "import workbench as wb\nrubric = wb.Rubric()\nrubric.metric(lambda completion: 1.0, name='n')\n",
    "notes.txt": "not python\n",
}
BAD_TRAFFIC = [
    (("--held-out", "1"), "--held-out 1"),
    (("--since", "last tuesday"), "--since 'last tuesday'"),
    (("--app", "nobody"), "no gateway traffic of app 'nobody'"),
    (("--judge", "none"), "--judge none needs --rubric FILE"),
    (("--rubric", "{tmp}/absent.py"), "absent.py: not a Python file"),
    (("--rubric", "{tmp}/notes.txt"), "notes.txt: not a Python file"),
    (("--rubric", "{tmp}/no_rubric.py"), "no_rubric.py: defines no `rubric`"),
    (("--rubric", "{tmp}/raises.py"), "raises.py: loading it raised RuntimeError: half-written"),
    (("--rubric", "{tmp}/metric_only.py", "--judge", "none"), "its rubric has no reward, and --judge none leaves none"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_TRAFFIC, ids=[" ".join(a) for a, _ in BAD_TRAFFIC])
def test_tasks_from_traffic_refuses_in_one_line_and_writes_nothing(cli: Callable[..., Any], tmp_path: Path,
                                                                    store_path: Path, args: tuple[str, ...],
                                                                    fragment: str) -> None:
    from workbench.store import Store

    Store(store_path).close()  # a store with no traffic in it
    for name, text in RUBRIC_FILES.items():
        (tmp_path / name).write_text(text)
    out = tmp_path / "new_env"
    assert_user_error(cli("tasks", "from-traffic", out, *(a.format(tmp=tmp_path) for a in args)), fragment)
    assert not out.exists()


def test_a_shadow_answers_every_call_recorded_never_returned(registered: str, gateway: Callable[..., Running],
                                                            store_path: Path) -> None:
    import openai

    gw = gateway("--route", "support=good", "--shadow", "support=cand")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    served = []
    for i in range(5):
        raw = oa.chat.completions.with_raw_response.create(model="support",
                                                           messages=[{"role": "user", "content": f"q{i}"}])
        assert raw.headers["X-Workbench-Arm"] == "good"  # the shadow's answer is never the one returned
        served.append(raw.headers["X-Workbench-Response-Id"])
    chunks = list(oa.chat.completions.create(model="support", stream=True,  # type: ignore[call-overload]
                                             messages=[{"role": "user", "content": "streamed"}]))
    assert chunks
    gw.stop()
    rows = rows_of(store_path)
    primary = [r for r in rows if "shadow_of" not in json.loads(r["state"])]
    shadow = [r for r in rows if "shadow_of" in json.loads(r["state"])]
    assert len(primary) == 6 and len(shadow) == 6
    assert {json.loads(r["state"])["arm"] for r in shadow} == {"cand"} and {r["route"] for r in shadow} == {
        "support~shadow"}
    by_primary = {json.loads(r["state"])["shadow_of"]: r for r in shadow}
    assert set(served) <= set(by_primary)  # each answer returned has its shadow's, paired by id
    for r in primary:  # the same conversation, the same session
        twin = by_primary[r["id"]]
        assert json.loads(twin["prompt"]) == json.loads(r["prompt"])
        assert json.loads(twin["state"])["session"] == json.loads(r["state"])["session"]


def test_promote_moves_the_split_without_a_restart(registered: str, gateway: Callable[..., Running],
                                                   cli: Callable[..., Any], env: dict[str, str]) -> None:
    import openai

    gw = gateway("--route", "support=good:0.5,cand:0.5")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)

    def arms(n: int) -> list[str]:
        return [oa.chat.completions.with_raw_response.create(
            model="support", messages=[{"role": "user", "content": "hi"}]).headers["X-Workbench-Arm"] for _ in range(n)]

    assert set(arms(40)) == {"good", "cand"}
    listed = last_json(cli("gateway", "routes", "--json", env=env).stdout)
    assert listed["routes"]["support"]["arms"] == [["good", 0.5], ["cand", 0.5]]
    moved = cli("gateway", "promote", "support", "cand", "--json", env=env)
    assert moved.rc == 0, moved.stderr
    assert last_json(moved.stdout)["spec"] == "support=cand:1"
    assert set(arms(30)) == {"cand"}  # the running gateway serves the new split at once
    back = cli("gateway", "promote", "support", "good:0.25", "--json", env=env)
    assert last_json(back.stdout)["spec"] == "support=good:0.25,cand:0.75"
    assert_user_error(cli("gateway", "promote", "support", "nobody", env=env), "nobody is none of its arms")
    assert_user_error(cli("gateway", "promote", "elsewhere", "cand", env=env), "the gateway has no route 'elsewhere'")
    assert set(arms(60)) == {"good", "cand"}


def _writer_of(pid: int) -> int:
    """The store writer process of the gateway ``pid``."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"store.writer" in cmd:
            return int(entry.name)
    raise AssertionError(f"the gateway {pid} has no store writer process")


def test_a_store_that_cannot_be_written_mid_traffic_costs_the_product_nothing(
        registered: str, gateway: Callable[..., Running], store_path: Path) -> None:
    """The store's writer process dies mid-traffic (as when its disk fails): every call is still answered, the
    exchanges not committed are counted as dropped, and the gateway says so once."""
    import os
    import signal

    import openai

    from tests.helpers import count_rollouts, wait_for

    gw = gateway("--route", "support=good")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)

    def call(i: int) -> str:
        reply = oa.chat.completions.create(model="support", messages=[{"role": "user", "content": f"call {i}"}])
        return reply.choices[0].message.content or ""

    assert all(f"call {i}" in call(i) for i in range(3))
    wait_for(lambda: count_rollouts(store_path) == 3, 60, "the first exchanges in the store")
    os.kill(_writer_of(gw.proc.pid), signal.SIGKILL)
    assert all(f"call {i}" in call(i) for i in range(3, 13))  # answered, every one, while nothing is written
    err = gw.stop()
    assert "gateway stopped: 13 served, 3 recorded, 10 dropped" in err, err
    assert err.count("exchanges are not being recorded") == 1, err
    assert count_rollouts(store_path) == 3


def test_compare_traffic_sets_a_routes_arms_side_by_side_on_feedback(
        registered: str, gateway: Callable[..., Running], cli: Callable[..., Any], env: dict[str, str]) -> None:
    import openai

    gw = gateway("--route", "support=good:0.5,cand:0.5")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    feedback = f"{gw.root}/v1/feedback"
    served = {"good": 0, "cand": 0}
    scores: dict[str, list[float]] = {"good": [], "cand": []}
    for i in range(40):
        raw = oa.chat.completions.with_raw_response.create(model="support",
                                                           messages=[{"role": "user", "content": f"ticket {i}"}])
        arm = raw.headers["X-Workbench-Arm"]
        served[arm] += 1
        if i % 4:  # three in four rated: the good arm well, the candidate badly
            score = (1.0 if arm == "good" else 0.25) - 0.25 * (i % 2)
            scores[arm].append(score)
            assert post(feedback, registered, {"response_id": raw.headers["X-Workbench-Response-Id"],
                                                "score": score})[0] == 200
    gw.stop()
    res = cli("compare", "--traffic", "support", "--baseline", "good", "--json", env=env)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    good, cand = out["arms"]
    assert (good["arm"], cand["arm"]) == ("good", "cand") and good["baseline"] and not cand["baseline"]
    assert (good["exchanges"], cand["exchanges"]) == (served["good"], served["cand"])
    assert (good["rated"], cand["rated"]) == (len(scores["good"]), len(scores["cand"]))
    assert good["mean_feedback"] == pytest.approx(sum(scores["good"]) / len(scores["good"]))
    delta = sum(scores["cand"]) / len(scores["cand"]) - sum(scores["good"]) / len(scores["good"])
    assert cand["delta"] == pytest.approx(delta) and cand["significant"] is True
    assert cand["ci95"][0] <= delta <= cand["ci95"][1] < 0 and cand["ci_method"] == "unpaired bootstrap"
    table = cli("compare", "--traffic", "support", env=env)
    assert table.rc == 0 and "good" in table.stdout and "cand" in table.stdout
    assert_user_error(cli("compare", "--traffic", "elsewhere", env=env), "no traffic of the route 'elsewhere'")
    assert_user_error(cli("compare", "run-1", "--traffic", "support", env=env), "not both")


def test_feedback_takes_the_answers_own_id_in_each_api(registered: str, gateway: Callable[..., Running],
                                                       cli: Callable[..., Any], env: dict[str, str]) -> None:
    """What an SDK hands the product is the answer's own id (chatcmpl-…, msg_…, resp_…): feedback by it reaches
    the same exchange as the gateway's X-Workbench-Response-Id."""
    import anthropic
    import openai

    gw = gateway("--route", "support=good")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    an = anthropic.Anthropic(base_url=gw.root, api_key=registered, max_retries=0)
    said = [{"role": "user", "content": "hi"}]
    chat = oa.chat.completions.with_raw_response.create(model="support", messages=said)  # type: ignore[arg-type]
    stream = oa.chat.completions.with_raw_response.create(model="support", messages=said, stream=True)  # type: ignore[arg-type, call-overload]
    chunks = list(stream.parse())
    resp = oa.responses.with_raw_response.create(model="support", input="hi")
    msg = an.messages.with_raw_response.create(model="support", max_tokens=16, messages=said)  # type: ignore[arg-type]
    answers = [(chat.parse().id, chat), (chunks[0].id, stream), (resp.parse().id, resp), (msg.parse().id, msg)]
    feedback = f"{gw.root}/v1/feedback"
    for answer_id, _ in answers:
        assert answer_id and not answer_id.startswith("gwr-")
        assert post(feedback, registered, {"response_id": answer_id, "score": 1.0})[0] == 200, answer_id
    gw.stop()
    for _, raw in answers:  # each is the exchange's own feedback
        shown = last_json(cli("show", raw.headers["X-Workbench-Response-Id"], "--json", env=env).stdout)
        assert [f["score"] for f in shown["feedback"]] == [1.0]


def test_a_priced_models_exchanges_carry_their_cost(registered: str, cli: Callable[..., Any], env: dict[str, str],
                                                    upstreams: dict[str, Any], gateway: Callable[..., Running],
                                                    store_path: Path) -> None:
    import openai

    from tests.gateway.support import PROVIDER_VAR
    from tests.helpers import count_rollouts, wait_for

    assert cli("models", "add", "priced", "--base-url", upstreams["good"].base_url, "--model-id", "mock-model",
               "--api-key-env", PROVIDER_VAR, "--input-price", "2", "--output-price", "8", env=env).rc == 0
    gw = gateway("--route", "support=priced", "--route", "free=good")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    for model in ("support", "free"):
        oa.chat.completions.create(model=model, messages=[{"role": "user", "content": "what does it cost"}])
    wait_for(lambda: count_rollouts(store_path) == 2, 60, "both exchanges recorded")
    gw.stop()
    conn = sqlite3.connect(store_path)
    try:
        rows = dict(((m, (p, c, usd)) for m, p, c, usd in conn.execute(
            "SELECT model, prompt_tokens, completion_tokens, cost_usd FROM rollout")))
        ledger = conn.execute("SELECT SUM(usd) FROM cost_event").fetchone()[0]
    finally:
        conn.close()
    p, c, usd = rows["priced"]
    assert p > 0 and c > 0 and usd == pytest.approx((p * 2 + c * 8) / 1e6)
    assert rows["good"][2] == 0.0 and ledger == pytest.approx(usd)


def test_sampled_recording_keeps_each_shadow_with_its_primary(registered: str, gateway: Callable[..., Running],
                                                             upstreams: dict[str, Any], store_path: Path) -> None:
    """Under --record-rate the call is sampled once: a recorded answer has its shadow's beside it, and a call not
    recorded is not asked of the shadow at all (no cost, no orphan)."""
    import openai

    gw = gateway("--route", "support=good", "--shadow", "support=cand", "--record-rate", "0.5", "--seed", "3")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0)
    for i in range(40):
        oa.chat.completions.create(model="support", messages=[{"role": "user", "content": f"q{i}"}])
    gw.stop()  # the shadows in flight finish and everything is committed before it exits
    rows = rows_of(store_path)
    primary = {r["id"] for r in rows if "shadow_of" not in json.loads(r["state"])}
    shadows = [json.loads(r["state"])["shadow_of"] for r in rows if "shadow_of" in json.loads(r["state"])]
    assert 5 < len(primary) < 35 and sorted(shadows) == sorted(primary)
    assert upstreams["cand"].requests() == len(primary) and upstreams["good"].requests() == 40
