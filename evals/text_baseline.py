"""The plain text classifier the next-action evaluation compares with (issue 14's forty-line baseline).

scikit-learn logistic regression over: the task, the previous two actions, the actions done so far,
whether a knowledge-base result just arrived, and TF-IDF of the user's last utterance; trained on the
train split with the same teacher-forced frames (``evals/datasets/star_actions.py``).  It knows no
workflow: it predicts one of the labels it saw, for any task.
"""

from __future__ import annotations

from typing import Any

from evals.datasets.star_actions import WizardStep


def text_inputs(step: WizardStep) -> dict[str, Any]:
    """What the classifier reads of a step (kept in memory only, never written)."""
    from workflows.text import last_user_text

    executed = list(step.frame.get("executed") or [])
    last = step.messages[-1] if step.messages else None
    return {"task": step.task, "prev1": executed[-1] if executed else "<none>",
            "prev2": executed[-2] if len(executed) > 1 else "<none>", "done": sorted(set(executed)),
            "kb": getattr(last, "type", "") == "tool", "text": last_user_text(step.messages)}


def _symbols(x: dict[str, Any]) -> dict[str, float]:
    out = {f"task={x['task']}": 1.0, f"prev1={x['prev1']}": 1.0, f"prev2={x['prev2']}": 1.0,
           f"prev12={x['prev1']}|{x['prev2']}": 1.0, "kb": float(x["kb"])}
    out.update({f"done={d}": 1.0 for d in x["done"]})
    return out


class TextClassifier:
    """DictVectorizer(symbols) + TF-IDF(user text) -> LogisticRegression."""

    def __init__(self, C: float = 4.0):
        self.C = C

    def fit(self, inputs: list[dict], labels: list[str]) -> "TextClassifier":
        from scipy.sparse import hstack
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.dv = DictVectorizer()
        self.tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        X = hstack([self.dv.fit_transform([_symbols(x) for x in inputs]),
                    self.tfidf.fit_transform([x["text"] for x in inputs])]).tocsr()
        self.lr = LogisticRegression(C=self.C, max_iter=1000).fit(X, labels)
        return self

    def predict(self, inputs: list[dict]) -> list[str]:
        from scipy.sparse import hstack

        if not inputs:
            return []
        X = hstack([self.dv.transform([_symbols(x) for x in inputs]),
                    self.tfidf.transform([x["text"] for x in inputs])]).tocsr()
        return list(self.lr.predict(X))
