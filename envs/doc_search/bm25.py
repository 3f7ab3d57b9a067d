"""A tiny pure-Python BM25 index over a folder of Markdown or text documents."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORD_TEXT = (
    "a an and are as at be by can do does for from has have how i in is it its many much of on or our "
    "per than that the their then there this to was we what when where which who whom why will with "
    "within you your"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
SUFFIXES = (".md", ".markdown", ".txt")


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens without stopwords, with plural endings folded ("policies" -> "policy")."""
    out = []
    for w in _WORD.findall(text.lower()):
        if w in _STOPWORDS:
            continue
        if len(w) > 4 and w.endswith("ies"):
            w = w[:-3] + "y"
        elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
            w = w[:-1]
        out.append(w)
    return out


@dataclass(slots=True)
class Doc:
    id: str
    title: str
    text: str
    tf: Counter[str] = field(default_factory=Counter)
    length: int = 0


class Corpus:
    """Documents by id (their path relative to the corpus folder, without the suffix) and a BM25 index."""

    def __init__(self, docs: list[Doc], k1: float = 1.5, b: float = 0.75) -> None:
        self.docs = {d.id: d for d in docs}
        self.k1, self.b = k1, b
        for d in docs:
            # The title counts twice: it is the best summary of what a document is about.
            tokens = tokenize(d.title) * 2 + tokenize(d.text)
            d.tf = Counter(tokens)
            d.length = len(tokens)
        self.avgdl = sum(d.length for d in docs) / max(len(docs), 1)
        df: Counter[str] = Counter()
        for d in docs:
            df.update(d.tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1.0 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    @classmethod
    def from_dir(cls, directory: str | Path) -> Corpus:
        root = Path(directory)
        docs = []
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES):
            rel = path.relative_to(root).with_suffix("").as_posix()
            text = path.read_text(encoding="utf-8", errors="replace").strip()
            docs.append(Doc(rel, _title(text, rel), text))
        return cls(docs)

    def __len__(self) -> int:
        return len(self.docs)

    def search(self, query: str, k: int = 5) -> list[tuple[Doc, float]]:
        """The ``k`` best documents for ``query`` with their BM25 scores (only documents scoring above 0)."""
        terms = list(dict.fromkeys(tokenize(query)))
        scored = []
        for d in self.docs.values():
            s = 0.0
            norm = self.k1 * (1.0 - self.b + self.b * d.length / self.avgdl)
            for t in terms:
                tf = d.tf.get(t)
                if tf:
                    s += self.idf[t] * tf * (self.k1 + 1.0) / (tf + norm)
            if s > 0.0:
                scored.append((d, s))
        scored.sort(key=lambda x: (-x[1], x[0].id))
        return scored[:k]

    def snippet(self, doc: Doc, query: str, width: int = 220) -> str:
        """The line of ``doc`` that shares the most words with ``query``, shortened to ``width`` characters."""
        terms = set(tokenize(query))
        best, best_key = "", (-1, False)
        for raw in doc.text.splitlines():
            line = raw.strip().lstrip("#-*| ").strip()
            if not line or line == doc.title:
                continue
            # More shared words first; on a tie, body text beats a section heading.
            key = (len(terms.intersection(tokenize(line))), not raw.lstrip().startswith("#"))
            if key > best_key:
                best, best_key = line, key
        return best if len(best) <= width else best[: width - 3].rstrip() + "..."

    def resolve(self, doc_id: str) -> Doc | None:
        """The document named ``doc_id``, forgiving case, surrounding space/quotes and a file suffix."""
        key = doc_id.strip().strip("'\"`").strip()
        for suffix in SUFFIXES:
            if key.lower().endswith(suffix):
                key = key[: -len(suffix)]
        if key in self.docs:
            return self.docs[key]
        lowered = {i.lower(): d for i, d in self.docs.items()}
        return lowered.get(key.lower())


def _title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return (line.strip().lstrip("#").strip() or fallback)[:120]
    return fallback
