"""Wordle: a multi-turn word game. The model guesses a secret word and gets per-letter feedback.

Feedback per letter: ``G`` = right letter in the right place, ``Y`` = in the word but elsewhere,
``X`` = not in the word (or already accounted for). Repeated letters are scored like real Wordle:
greens are matched first, then yellows left to right while unmatched copies of the letter remain.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import workbench as wb

WORDS_FILE = Path(__file__).with_name("words.txt")

SYSTEM_PROMPT = """You are playing Wordle. Find the secret {length}-letter English word.
Each turn, guess one {length}-letter word (letters a-z only) and write it as <guess>word</guess>.
After each guess you get one feedback letter per position:
  G = this letter is in the word and in this position,
  Y = this letter is in the word but in another position,
  X = this letter is not in the word (or appears fewer times than you used it).
Use the feedback to narrow down the word. You have {max_turns} guesses; an invalid guess also uses one.
Put exactly one <guess>...</guess> in every reply."""

PROMPT = "Guess the secret {length}-letter word in at most {max_turns} guesses. Reply with <guess>word</guess>."

_TAG = re.compile(r"<guess>\s*(.*?)\s*</guess>", re.IGNORECASE | re.DOTALL)
_TAG_MARKUP = re.compile(r"</?guess>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*", re.IGNORECASE | re.DOTALL)


@lru_cache(maxsize=8)
def load_words(length: int = 5, path: str = str(WORDS_FILE)) -> tuple[str, ...]:
    """The distinct lowercase words of ``length`` letters in the word list, in file order."""
    words: dict[str, None] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        w = line.strip().lower()
        if len(w) == length and w.isascii() and w.isalpha():
            words[w] = None
    return tuple(words)


def score_guess(guess: str, secret: str) -> str:
    """Wordle feedback for ``guess`` against ``secret``: one of G/Y/X per letter ("crane" vs "cargo" -> "GYYXX")."""
    guess, secret = guess.lower(), secret.lower()
    if len(guess) != len(secret):
        raise ValueError(f"guess {guess!r} and secret {secret!r} differ in length")
    marks = ["X"] * len(guess)
    unmatched: Counter[str] = Counter()
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
        else:
            unmatched[s] += 1
    for i, g in enumerate(guess):
        if marks[i] != "G" and unmatched[g] > 0:
            marks[i] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


def parse_guess(text: str | None, length: int = 5) -> tuple[str | None, str]:
    """Find the guess in a model reply: the last ``<guess>...</guess>``, else the last ``length``-letter word.

    Returns ``(guess, "")`` for a valid guess, or ``(None, reason)`` saying why there is none.
    """
    text = text or ""
    if "</think>" in text:  # reasoning before the answer is not a guess
        text = text.rsplit("</think>", 1)[1]
    text = _THINK_OPEN.sub(" ", text)  # an unfinished reasoning block
    tagged = _TAG.findall(text)
    if tagged:
        g = tagged[-1].strip().lower()
        if len(g) == length and g.isascii() and g.isalpha():
            return g, ""
        return None, f"{tagged[-1].strip()!r} is not a valid guess: it must be exactly {length} letters a-z."
    words = re.findall(rf"(?<![A-Za-z])[A-Za-z]{{{length}}}(?![A-Za-z])", _TAG_MARKUP.sub(" ", text))
    if words:
        return words[-1].lower(), ""
    return None, f"I found no {length}-letter guess in your reply."


def _new_game(secret: str, max_turns: int) -> dict[str, Any]:
    return {"secret": secret.lower(), "max_turns": max_turns, "guesses": [], "feedback": [],
            "invalid_guesses": 0, "turns": 0, "solved": False, "solved_on_turn": None, "last": None}


def _ensure_game(state: dict[str, Any], secret: Any, max_turns: int) -> dict[str, Any]:
    """Initialise the game keys of ``state`` once (from the task's answer) and return ``state``."""
    if "secret" not in state:
        if secret is None and state.get("task") is not None:
            secret = getattr(state["task"], "answer", None)
        if not secret:
            raise ValueError("wordle: the task has no secret word (its answer is empty)")
        state.update(_new_game(str(secret), max_turns))
    return state


def judge_pending(messages: list[dict[str, Any]], state: dict[str, Any]) -> None:
    """Score every assistant turn of ``messages`` not yet scored into ``state`` (idempotent).

    Rewards call this too, because the harness ends the episode after the final model turn without
    asking ``respond`` about it; this way the last guess always counts.
    """
    replies = [m for m in messages if m.get("role") == "assistant"]
    length = len(state["secret"])
    for m in replies[state["turns"]:]:
        if state["solved"]:
            break
        state["turns"] += 1
        content = m.get("content")
        text = content if isinstance(content, str) else "".join(
            p.get("text", "") for p in content or [] if isinstance(p, dict))
        guess, reason = parse_guess(text, length)
        if guess is None:
            state["invalid_guesses"] += 1
            state["last"] = {"guess": None, "reason": reason}
            continue
        marks = score_guess(guess, state["secret"])
        state["guesses"].append(guess)
        state["feedback"].append(marks)
        state["last"] = {"guess": guess, "feedback": marks}
        if guess == state["secret"]:
            state["solved"] = True
            state["solved_on_turn"] = state["turns"]


class WordleHarness(wb.MultiTurn):
    """Ask for a guess, answer with G/Y/X feedback, stop when the word is found or the turns run out."""

    async def setup(self, task: Any, state: dict[str, Any]) -> None:
        state.pop("secret", None)  # a fresh game, even if the state dict is reused
        _ensure_game(state, task.answer, self.max_turns)

    async def respond(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]] | None:
        _ensure_game(state, None, self.max_turns)
        judge_pending(messages, state)
        if state["solved"]:
            return None
        left = max(state["max_turns"] - state["turns"], 0)
        plural = "guess" if left == 1 else "guesses"
        last = state["last"] or {"guess": None, "reason": "I found no guess in your reply."}
        if last["guess"] is None:
            text = f"Invalid guess: {last['reason']} That used a turn. {left} {plural} left."
        else:
            text = f"{last['guess'].upper()}: {' '.join(last['feedback'])}. {left} {plural} left."
        return [{"role": "user", "content": text + " Reply with <guess>word</guess>."}]


def make_rows(n: int, seed: int, words: tuple[str, ...], max_turns: int) -> list[dict[str, Any]]:
    """``n`` tasks whose secrets follow a seeded shuffle of the word list (prefix-stable in ``n``)."""
    order = list(words)
    random.Random(seed).shuffle(order)
    length = len(order[0])
    prompt = PROMPT.format(length=length, max_turns=max_turns)
    rows = []
    for i in range(n):
        rnd, secret = divmod(i, len(order))
        rows.append({"prompt": prompt, "answer": order[secret], "info": {"round": rnd} if rnd else {}})
    return rows


def load_environment(n: int = 100, seed: int = 0, max_turns: int = 6, word_length: int = 5) -> wb.Environment:
    """Wordle over the bundled word list: ``n`` secret words chosen by ``seed``, ``max_turns`` guesses."""
    if not isinstance(n, int) or n < 1:
        raise wb.EnvLoadError(f"wordle: n must be a positive integer, got {n!r}")
    if not isinstance(max_turns, int) or max_turns < 1:
        raise wb.EnvLoadError(f"wordle: max_turns must be a positive integer, got {max_turns!r}")
    words = load_words(word_length)
    if not words:
        raise wb.EnvLoadError(
            f"wordle: the word list {WORDS_FILE} has no {word_length}-letter words; "
            f"use word_length=5 or add {word_length}-letter words to it")
    tasks = wb.TaskSet.from_records(make_rows(n, seed, words, max_turns), name="wordle")
    rubric = wb.Rubric()

    def game(messages: list[dict[str, Any]], state: dict[str, Any], answer: Any) -> dict[str, Any]:
        _ensure_game(state, answer, max_turns)
        judge_pending(messages or [], state)
        return state

    @rubric.reward(weight=1.0)
    def solved(messages: list[dict[str, Any]], state: dict[str, Any], answer: str) -> float:
        """1 when one of the guesses was the secret word."""
        return 1.0 if game(messages, state, answer)["solved"] else 0.0

    @rubric.reward(weight=0.2)
    def efficiency(messages: list[dict[str, Any]], state: dict[str, Any], answer: str) -> float:
        """1 for a first-turn solve, falling by 1/max_turns per extra turn; 0 when unsolved."""
        g = game(messages, state, answer)
        if not g["solved"]:
            return 0.0
        return 1.0 - (g["solved_on_turn"] - 1) / g["max_turns"]

    @rubric.metric
    def guesses(messages: list[dict[str, Any]], state: dict[str, Any], answer: str) -> float:
        """How many valid guesses the model made."""
        return float(len(game(messages, state, answer)["guesses"]))

    @rubric.metric
    def invalid_guesses(messages: list[dict[str, Any]], state: dict[str, Any], answer: str) -> float:
        """How many turns had no valid guess."""
        return float(game(messages, state, answer)["invalid_guesses"])

    return wb.Environment(
        name="wordle",
        tasks=tasks,
        harness=WordleHarness(
            max_turns=max_turns, system_prompt=SYSTEM_PROMPT.format(length=word_length, max_turns=max_turns)),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=512, temperature=1.0),
        description=f"Wordle with {word_length}-letter words and {max_turns} guesses; G/Y/X feedback each turn.",
    )
