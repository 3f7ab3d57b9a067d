"""Doc search: answer questions about a company by searching and reading its internal documents.

The bundled corpus describes a made-up company, Acme Robotics. This environment is the template for
your own: point ``corpus_dir`` at a folder of Markdown/text files and ``questions`` at a JSONL file
of ``{"question", "answer", "info": {"source": <doc id>}}`` rows (see README.md).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import workbench as wb

from .bm25 import SUFFIXES, Corpus

HERE = Path(__file__).parent
DEFAULT_CORPUS = HERE / "corpus"
DEFAULT_QUESTIONS = HERE / "questions.jsonl"
SPLITS = ("all", "train", "test")
MAX_K = 20

SYSTEM_PROMPT = """You answer questions about a company using its internal documents.
Tools:
- search(query, k): find documents; returns document ids, titles and a matching snippet.
- read(doc_id): the full text of one document.
Search with a few specific keywords, read the most promising document, and base your answer only
on what the documents say. When you know the answer, reply without calling a tool and end your
reply with one line:
ANSWER: <short answer>
Keep the answer short: a number with its unit, a name, a date or a few words."""

_ARTICLES = frozenset({"a", "an", "the"})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN = re.compile(r"[^\W_]+(?:[.:]\d+)*")
_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)

_CORPUS_CACHE: dict[tuple[Any, ...], Corpus] = {}


def load_corpus(corpus_dir: str | Path | None = None) -> Corpus:
    """The corpus in ``corpus_dir`` (default: the bundled Acme documents), indexed once and cached.

    The cache key includes every file's size and modification time, so edited documents are re-indexed.
    """
    root = Path(corpus_dir).expanduser() if corpus_dir else DEFAULT_CORPUS
    if not root.is_dir():
        raise wb.EnvLoadError(f"doc_search: corpus_dir {str(root)!r} is not a directory of .md or .txt files")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise wb.EnvLoadError(f"doc_search: {root} holds no .md or .txt documents; add some or fix corpus_dir")
    key = (str(root.resolve()), *((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    corpus = _CORPUS_CACHE.get(key)
    if corpus is None:
        corpus = _CORPUS_CACHE[key] = Corpus.from_dir(root)
    return corpus


def make_tools(corpus: Corpus) -> list[Callable[..., str]]:
    """The ``search`` and ``read`` tools over ``corpus``; their signatures and docstrings are the schemas."""

    def search(query: str, k: int = 5) -> str:
        """Search the company documents by keywords and list the best matches.

        Args:
            query: Keywords to look for, e.g. "hotel limit London" or "Rover X3 battery runtime".
            k: How many documents to return (1 to 20).

        Returns:
            One entry per document: its id (pass it to read), its title and the best-matching line.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query is empty; pass a few keywords, e.g. search(query='parental leave weeks')")
        k = max(1, min(int(k), MAX_K))
        hits = corpus.search(query, k)
        if not hits:
            return f"No documents match {query!r}. Try other or fewer keywords."
        lines = []
        for rank, (doc, score) in enumerate(hits, 1):
            lines.append(f"{rank}. doc_id: {doc.id} | {doc.title} (score {score:.2f})")
            lines.append(f"   {corpus.snippet(doc, query)}")
        return "\n".join(lines)

    def read(doc_id: str) -> str:
        """Read the full text of one document.

        Args:
            doc_id: The document id exactly as listed by search, e.g. "expense-policy".

        Returns:
            The document's full text.
        """
        doc = corpus.resolve(str(doc_id))
        if doc is None:
            close = difflib.get_close_matches(str(doc_id).strip().lower(), list(corpus.docs), n=3, cutoff=0.4)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"there is no document with id {doc_id!r}.{hint} Use an id from the search results.")
        return f"doc_id: {doc.id}\n\n{doc.text}"

    return [search, read]


def normalize(text: str | None) -> str:
    """Lowercase words without punctuation or articles; "1,200" -> "1200", decimals and times kept."""
    text = _THOUSANDS.sub("", (text or "").lower())
    return " ".join(t for t in _TOKEN.findall(text) if t not in _ARTICLES)


def final_answer(completion: str | None) -> str:
    """The text after the last "ANSWER:" of the completion, or the whole completion if there is none."""
    text = completion or ""
    found = list(_ANSWER.finditer(text))
    return text[found[-1].end():] if found else text


#: Words a final answer may have beyond the gold answer's own ("founded in 2011"): a longer one that holds the
#: gold answer among many candidates (every number of the corpus, every name) earns nothing.
SPARE_WORDS = 6


def mentions(text: str | None, gold: Any) -> bool:
    """True when the normalized gold answer appears, as whole words, in the normalized text."""
    g = normalize(str(gold)) if gold is not None else ""
    return bool(g) and f" {g} " in f" {normalize(text)} "


def answer_matches(prediction: str | None, gold: Any) -> bool:
    """True when the prediction mentions the gold answer and is an answer, not a list of candidates: at most
    ``SPARE_WORDS`` words more than the gold answer (``workbench probe``'s every-answer policy checks it)."""
    g = normalize(str(gold)) if gold is not None else ""
    return mentions(prediction, gold) and len(normalize(prediction).split()) <= len(g.split()) + SPARE_WORDS


def tool_calls_of(messages: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    """``(tool name, parsed arguments)`` for every tool call the assistant made."""
    out = []
    for m in messages or ():
        if m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            raw = fn.get("arguments") or {}
            try:
                args = json.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
            except (ValueError, TypeError):
                args = {}
            out.append((str(fn.get("name", "")), args if isinstance(args, dict) else {}))
    return out


def _split_of(task: wb.Task) -> str:
    """A question's split: its ``info["split"]``, else a stable 80/20 train/test hash of its id."""
    s = task.info.get("split")
    if s in ("train", "test"):
        return s
    return "test" if int(hashlib.sha256(task.id.encode()).hexdigest(), 16) % 5 == 0 else "train"


def load_environment(split: str = "all", corpus_dir: str | None = None, questions: str | None = None) -> wb.Environment:
    """Question answering over a document folder with ``search`` and ``read`` tools."""
    if split not in SPLITS:
        raise wb.EnvLoadError(f"doc_search: split must be one of {', '.join(SPLITS)}, got {split!r}")
    corpus = load_corpus(corpus_dir)
    qpath = Path(questions).expanduser() if questions else DEFAULT_QUESTIONS
    tasks = wb.TaskSet.from_jsonl(qpath, name="doc_search")
    missing = sorted({str(t.info["source"]) for t in tasks if t.info.get("source") is not None
                      and corpus.resolve(str(t.info["source"])) is None})
    if missing:
        raise wb.EnvLoadError(
            f"doc_search: {qpath} names source documents that {corpus_dir or DEFAULT_CORPUS} lacks: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; pass matching corpus_dir and questions")
    if split != "all":
        tasks = tasks.filter(lambda t: _split_of(t) == split)

    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        """1 when the gold answer appears in the text after "ANSWER:" (normalized)."""
        return 1.0 if answer_matches(final_answer(completion), answer) else 0.0

    @rubric.metric
    def tool_calls(messages: list[dict[str, Any]]) -> float:
        """How many tool calls the model made."""
        return float(len(tool_calls_of(messages)))

    @rubric.metric
    def read_source(messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
        """1 when the model read the document the answer comes from."""
        source = corpus.resolve(str(info.get("source", ""))) if info else None
        if source is None:
            return 0.0
        for name, args in tool_calls_of(messages):
            if name == "read" and isinstance(args.get("doc_id"), str) and corpus.resolve(args["doc_id"]) is source:
                return 1.0
        return 0.0

    return wb.Environment(
        name="doc_search",
        tasks=tasks,
        harness=wb.ToolLoop(tools=make_tools(corpus), max_turns=8, system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=1024, temperature=1.0),
        description="Answer questions about a company from its internal documents with search and read tools.",
    )
