"""The text_similarity grader's evaluation metrics, each a score from 0 to 1 computed by a real library.

The graders guide names the metrics and, for ``fuzzy_match``, the library (rapidfuzz); the packages its
Python grader image ships (rapidfuzz, nltk, rouge-score) are the ones used for the rest:

- ``fuzzy_match``: ``rapidfuzz.fuzz.WRatio`` with rapidfuzz's default processing, over 100 (as the guide's
  own fuzzy example computes it);
- ``bleu``: NLTK's sentence BLEU (four n-gram orders, equal weights, no smoothing) on whitespace tokens;
- ``gleu``: NLTK's sentence GLEU (Google BLEU) on whitespace tokens;
- ``meteor``: NLTK's METEOR on whitespace tokens; it needs NLTK's WordNet corpus, which no package on PyPI
  installs: with it absent the metric is refused when the eval is imported or loaded;
- ``rouge_1`` .. ``rouge_5``, ``rouge_l``: rouge-score's F-measure (``rouge1`` .. ``rouge5``, ``rougeL``);
- ``cosine``: cosine similarity of ``text-embedding-3-large`` embeddings, OpenAI's hosted model, which
  cannot be computed offline: refused by name.

They need the extra: ``pip install 'rl-workbench[openai-evals]'``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from workbench.formats.openai_evals.errors import EvalDefinitionError

METRICS = ("fuzzy_match", "bleu", "gleu", "meteor", "cosine", "rouge_1", "rouge_2", "rouge_3", "rouge_4",
           "rouge_5", "rouge_l")
_EXTRA = "pip install 'rl-workbench[openai-evals]'"


def unavailable(metric: str) -> str | None:
    """Why ``metric`` cannot be computed here (one sentence), or None when it can."""
    if metric == "cosine":
        return ("cosine compares text-embedding-3-large embeddings, OpenAI's hosted embedding model, which "
                "cannot run offline; use another evaluation_metric")
    module = {"fuzzy_match": "rapidfuzz", "bleu": "nltk", "gleu": "nltk", "meteor": "nltk"}.get(metric, "rouge_score")
    try:
        __import__(module)
    except ImportError:
        return f"{metric} needs the {module} package: {_EXTRA}"
    if metric == "meteor":
        import nltk

        try:
            nltk.data.find("corpora/wordnet")
        except LookupError:
            return ("meteor needs NLTK's WordNet corpus, which is not on this machine (python -m nltk.downloader "
                    "wordnet installs it)")
    return None


def require(metric: str, where: str) -> None:
    if metric not in METRICS:
        raise EvalDefinitionError(f"{where}: {metric!r} is no evaluation_metric (they are {', '.join(METRICS)})")
    why = unavailable(metric)
    if why is not None:
        raise EvalDefinitionError(f"{where}: {why}")


def score(metric: str, text: str, reference: str) -> float:
    """``metric`` of ``text`` against ``reference``, from 0 to 1."""
    return float(_METRIC[metric](text, reference))


def _fuzzy(text: str, reference: str) -> float:
    from rapidfuzz import fuzz, utils

    return fuzz.WRatio(text, reference, processor=utils.default_process) / 100.0


def _bleu(text: str, reference: str) -> float:
    from nltk.translate.bleu_score import sentence_bleu

    with warnings.catch_warnings():  # NLTK warns when an n-gram order has no overlap; the score is 0 then
        warnings.simplefilter("ignore")
        return float(sentence_bleu([reference.split()], text.split()))


def _gleu(text: str, reference: str) -> float:
    from nltk.translate.gleu_score import sentence_gleu

    return float(sentence_gleu([reference.split()], text.split()))


def _meteor(text: str, reference: str) -> float:
    from nltk.translate.meteor_score import meteor_score

    return float(meteor_score([reference.split()], text.split()))


def _rouge(kind: str) -> Callable[[str, str], float]:
    def compute(text: str, reference: str) -> float:
        from rouge_score import rouge_scorer

        return float(rouge_scorer.RougeScorer([kind]).score(reference, text)[kind].fmeasure)

    return compute


_METRIC: dict[str, Callable[[str, str], float]] = {
    "fuzzy_match": _fuzzy, "bleu": _bleu, "gleu": _gleu, "meteor": _meteor,
    **{f"rouge_{n}": _rouge(f"rouge{n}") for n in range(1, 6)}, "rouge_l": _rouge("rougeL"),
}
