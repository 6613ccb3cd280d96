"""Evaluation reports: ``report.md`` (markdown tables), ``metrics.json`` and PNG plots in one folder."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

os.environ.setdefault("MPLBACKEND", "Agg")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Report:
    """Collects sections and writes them with the metrics they came from."""

    def __init__(self, out_dir: str | Path, title: str):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.parts: list[str] = [f"# {title}", ""]

    def text(self, paragraph: str) -> None:
        self.parts += [paragraph.strip(), ""]

    def table(self, caption: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        self.parts += [f"## {caption}", "", md_table(headers, list(rows)), ""]

    def bar_plot(self, name: str, labels: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
                 title: str = "") -> Path:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) * max(1, len(series))), 4))
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series.items()):
            ax.bar([x + i * width for x in range(len(labels))], values, width, label=label)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(labels))])
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if len(series) > 1:
            ax.legend(fontsize=8)
        return self._save(fig, name, title)

    def line_plot(self, name: str, xs: Sequence[float], series: dict[str, Sequence[float]], xlabel: str,
                  ylabel: str, title: str = "") -> Path:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for label, values in series.items():
            ax.plot(list(xs), list(values), marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_xticks(list(xs))
        if len(xs) > 8:  # many ticks: slanted, so their labels do not run into each other
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_ylim(0, 1.02)
        if title:
            ax.set_title(title)
        if len(series) > 1:
            ax.legend(fontsize=7)
        return self._save(fig, name, title)

    def _save(self, fig, name: str, title: str) -> Path:
        """Write the figure as ``<name>.png`` beside the report and link it from the markdown."""
        import matplotlib.pyplot as plt

        fig.tight_layout()
        path = self.out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        self.parts += [f"![{title or name}]({path.name})", ""]
        return path

    def write(self, metrics: dict[str, Any]) -> Path:
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True, default=float))
        path = self.out / "report.md"
        path.write_text("\n".join(self.parts))
        return path
