"""Mermaid flowcharts: a small parser and a compiler from a flowchart graph to a PDL procedure.

Parser (``parse_mermaid``): nodes ``A[...]``, ``A(...)``, ``A{...}``, ``A>...]`` and the other
bracket shapes (text may span lines and contain nested brackets), edges ``-->``, ``-->|label|``,
``-- label -->`` (also ``---``, ``==>``, ``-.->``), chains ``A --> B --> C``.  Lines that are
not statements (``flowchart TD``, ``style``, prose after the chart) are skipped.

Compiler (``compile_graph``): walks the graph from its start node and writes a structured
procedure.  Each node contributes the lines its ``NodeAction`` gives; a node with several
outgoing edges becomes ``if COND("<question> -> <label>"):`` / ``elif`` / ``else`` (the last
label kept as a comment).  Nodes reached again from another branch (merges) are written again
in that branch, so every branch reads top to bottom.

Loops (a documented choice): an edge back to a node on the current path makes that node a
loop header, written ``while COND("<node> (first time, or again after: <labels>)"):``.  Inside,
the edge back to the innermost header is ``pass`` (the loop body ends and the condition is
judged again), an edge back to an outer header is ``break`` (the inner loop ends, the outer
loop's condition decides), and a path that ends inside a loop ends with ``break``.

Preconditions (``dominators``): an API's precondition is the set of APIs called in nodes that
dominate it (lie on every path from the start), plus APIs called earlier in the same node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

# Openers and their closers, longest first; ``>`` is Mermaid's asymmetric shape ``A>text]``.
_SHAPES = [("(((", ")))", "circle"), ("((", "))", "circle"), ("([", "])", "stadium"), ("[[", "]]", "subroutine"),
           ("[(", ")]", "cylinder"), ("[/", "/]", "parallelogram"), ("[\\", "\\]", "parallelogram"),
           ("{{", "}}", "hexagon"), ("[", "]", "rect"), ("(", ")", "round"), ("{", "}", "decision"),
           (">[", "]", "asymmetric"), (">", "]", "asymmetric")]
_ID = re.compile(r"[A-Za-z0-9_]+")
_EDGE_PIPE = re.compile(r"\s*(-->|---|==>|-\.->|--o|--x)\s*(?:\|([^|\n]*)\|)?")
_EDGE_TEXT = re.compile(r"\s*(--|==|-\.)(?![->])\s*([^\n]*?)\s*(-->|==>|\.->|---)")
_SKIP = re.compile(r"(?:(?:flowchart|graph|subgraph|end|style|classDef|class|click|linkStyle|direction)\b|%%)")


class MermaidError(ValueError):
    pass


@dataclass
class Node:
    id: str
    text: str = ""
    shape: str = "rect"

    @property
    def label(self) -> str:
        return self.text or self.id


@dataclass
class Edge:
    src: str
    dst: str
    label: str = ""
    test: str = ""  # a PDL condition written as-is (e.g. ``Status == "Available"``) instead of COND(label)


@dataclass
class Flowchart:
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    direction: str = "TD"

    def out(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.src == node_id]

    def preds(self, node_id: str) -> list[str]:
        return [e.src for e in self.edges if e.dst == node_id]

    def start(self) -> str:
        """The node labelled Start, else the first node without incoming edges, else the first node."""
        if not self.nodes:
            raise MermaidError("the flowchart has no nodes")
        for n in self.nodes.values():
            if n.text.strip().lower() in ("start", "begin"):
                return n.id
        targets = {e.dst for e in self.edges}
        return next((n for n in self.nodes if n not in targets), next(iter(self.nodes)))

    def reachable(self) -> list[str]:
        seen, order, todo = set(), [], [self.start()]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            todo.extend(reversed([e.dst for e in self.out(n)]))
        return order


def _clean(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    text = re.sub(r"<br\s*/?>", "\n", text).replace("&quot;", '"').replace("#quot;", '"')
    return "\n".join(line.rstrip() for line in text.splitlines()).strip()


def _shape_at(src: str, pos: int) -> tuple[str, str, int] | None:
    """(text, shape, end position) of a node shape starting at ``pos``, or None."""
    for opener, closer, shape in _SHAPES:
        if not src.startswith(opener, pos):
            continue
        start = pos + len(opener)
        if len(closer) == 1 and opener in ("[", "(", "{", ">", ">["):
            # Single brackets may nest inside the text ("[Yes, No]"): count depth.
            open_ch = {"]": "[", ")": "(", "}": "{"}[closer]
            depth, i = 0, start
            while i < len(src):
                ch = src[i]
                if ch == open_ch:
                    depth += 1
                elif ch == closer:
                    if depth == 0:
                        return _clean(src[start:i]), shape, i + 1
                    depth -= 1
                i += 1
            raise MermaidError(f"unclosed {opener!r} for a node at offset {pos}")
        end = src.find(closer, start)
        if end < 0:
            raise MermaidError(f"unclosed {opener!r} for a node at offset {pos}")
        return _clean(src[start:end]), shape, end + len(closer)
    return None


def parse_mermaid(source: str) -> Flowchart:
    """Parse a Mermaid ``flowchart``/``graph``; raises ``MermaidError`` on an unclosed shape."""
    chart = Flowchart()
    src = source.replace("\r\n", "\n")
    m = re.search(r"^\s*(?:flowchart|graph)\s+(TB|TD|BT|RL|LR)?", src, re.M | re.I)
    pos = m.end() if m else 0
    if m and m.group(1):
        chart.direction = m.group(1).upper()

    def node_at(p: int) -> tuple[str, int] | None:
        idm = _ID.match(src, p)
        if not idm or not idm.group(0):
            return None
        nid, p = idm.group(0), idm.end()
        shape = _shape_at(src, p)
        node = chart.nodes.get(nid)
        if shape:
            text, kind, p = shape
            if node is None or not node.text:
                chart.nodes[nid] = Node(nid, text, kind)
        elif node is None:
            chart.nodes[nid] = Node(nid)
        return nid, p

    def group_at(p: int) -> tuple[list[str], int] | None:
        """``A`` or ``A & B & C`` (Mermaid's node groups)."""
        got = node_at(p)
        if got is None:
            return None
        ids, p = [got[0]], got[1]
        while (amp := re.match(r"[ \t]*&[ \t]*", src[p:])):
            more = node_at(p + amp.end())
            if more is None:
                break
            ids.append(more[0])
            p = more[1]
        return ids, p

    while pos < len(src):
        # Skip blank space and separators between statements.
        while pos < len(src) and src[pos] in " \t\n;":
            pos += 1
        if pos >= len(src):
            break
        line_end = src.find("\n", pos)
        line_end = len(src) if line_end < 0 else line_end
        if _SKIP.match(src, pos):
            pos = line_end
            continue
        before = set(chart.nodes)
        first = group_at(pos)
        if first is None:
            pos = line_end
            continue
        ids, p = first
        had_shape = any(chart.nodes[i].text and i not in before for i in ids)
        chained = False
        while True:
            em = _EDGE_PIPE.match(src, p)
            label = None
            if em:
                label = em.group(2) or ""
            else:
                em = _EDGE_TEXT.match(src, p)
                if em:
                    label = em.group(2)
            if em is None:
                break
            q = em.end()
            while q < len(src) and src[q] in " \t":
                q += 1
            nxt = group_at(q)
            if nxt is None:
                raise MermaidError(f"edge from {ids[0]!r} has no target (offset {q})")
            for a in ids:
                for b in nxt[0]:
                    chart.edges.append(Edge(a, b, _clean(label or "")))
            ids, p = nxt
            chained = True
        rest = src[p:line_end] if p <= line_end else ""
        if not chained and (not had_shape or (rest.strip() and not rest.strip().startswith(";"))):
            # A bare word followed by prose ("The auxiliary parameter ...") is not a statement.
            for n in set(chart.nodes) - before:
                del chart.nodes[n]
            pos = line_end
            continue
        pos = p
    return chart


# --- compiling a graph into a procedure -----------------------------------------------------------

def pystr(text: str) -> str:
    """A one-line double-quoted Python string literal."""
    flat = " ".join(text.split())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class NodeAction:
    """What one graph node does: procedure lines (no indentation) and the PDL nodes they call."""

    lines: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # API / ANSWER names in call order
    question: str = ""  # how a branch on this node's outgoing edges is phrased


@dataclass
class Compiled:
    procedure: str
    preconditions: dict[str, list[str]]  # node name -> APIs that dominate it
    unreachable: list[str]  # graph nodes never reached from the start
    loops: list[str]  # graph nodes written as while-loop headers
    cut: list[str]  # nodes not expanded again because the size cap was hit


@dataclass
class _Back:
    target: str
    label: str


@dataclass
class _T:
    id: str
    children: list[tuple[str, "_T | _Back | _Cut"]] = field(default_factory=list)
    header: bool = False
    back_labels: list[str] = field(default_factory=list)


@dataclass
class _Cut:
    target: str


def dominators(chart: Flowchart) -> dict[str, set[str]]:
    """Classic iterative dominator sets over the nodes reachable from the start."""
    nodes = chart.reachable()
    start = chart.start()
    reach = set(nodes)
    dom = {n: set(nodes) for n in nodes}
    dom[start] = {start}
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n == start:
                continue
            preds = [p for p in chart.preds(n) if p in reach]
            new = set.intersection(*(dom[p] for p in preds)) if preds else set()
            new = new | {n}
            if new != dom[n]:
                dom[n], changed = new, True
    return dom


def compile_graph(chart: Flowchart, action: Callable[[Node], NodeAction], api_names: set[str],
                  max_expansions: int = 400) -> Compiled:
    start = chart.start()
    actions = {nid: action(chart.nodes[nid]) for nid in chart.reachable()}
    budget = {"left": max_expansions}
    cut: list[str] = []
    expanded: set[str] = set()

    def build(nid: str, path: list[str]) -> tuple[_T, set[str]]:
        t = _T(nid)
        backs: set[str] = set()
        path = path + [nid]
        expanded.add(nid)
        for e in chart.out(nid):
            if e.dst in path:
                t_child: _T | _Back | _Cut = _Back(e.dst, e.label)
                backs.add(e.dst)
            elif budget["left"] <= 0 and e.dst in expanded:
                t_child = _Cut(e.dst)
                cut.append(e.dst)
            else:
                budget["left"] -= 1
                t_child, sub = build(e.dst, path)
                backs |= sub
            t.children.append((e.label, t_child))
        if nid in backs:
            t.header = True
            backs.discard(nid)
        return t, backs

    tree, _ = build(start, [])
    loops: list[str] = []

    def collect_back_labels(t: _T, acc: dict[str, list[str]]):
        for label, c in t.children:
            if isinstance(c, _Back):
                acc.setdefault(c.target, []).append(label)
            elif isinstance(c, _T):
                collect_back_labels(c, acc)

    back_labels: dict[str, list[str]] = {}
    collect_back_labels(tree, back_labels)

    def title(nid: str) -> str:
        return actions[nid].question or chart.nodes[nid].label

    out: list[str] = []
    tests = {(e.src, e.dst): e.test for e in chart.edges if e.test}

    def emit(ind: int, line: str) -> None:
        out.append("    " * ind + line)

    def render(t: _T, loops_open: list[str], ind: int) -> None:
        if t.header:
            labels = [lb for lb in back_labels.get(t.id, []) if lb]
            again = f" (first time, or again after: {'; '.join(dict.fromkeys(labels))})" if labels else " (first time, or again)"
            emit(ind, f"while COND({pystr(title(t.id) + again)}):")
            loops_open = loops_open + [t.id]
            ind += 1
            if t.id not in loops:
                loops.append(t.id)
        start_len = len(out)
        for line in actions[t.id].lines:
            emit(ind, line)
        kids = t.children
        if not kids:
            if loops_open:
                emit(ind, "break  # the flow ends here")
        elif len(kids) == 1:
            label, kid = kids[0]
            if label:
                emit(ind, f"# {' '.join(label.split())}")
            render_child(kid, loops_open, ind)
        else:
            question = title(t.id)
            for i, (label, kid) in enumerate(kids):
                label = label or f"go to {title(kid.target) if not isinstance(kid, _T) else title(kid.id)}"
                if i == len(kids) - 1:
                    emit(ind, "else:")
                    emit(ind + 1, f"# {' '.join(label.split())}")
                else:
                    kw = "if" if i == 0 else "elif"
                    test = tests.get((t.id, kid.id if isinstance(kid, _T) else kid.target))
                    emit(ind, f"{kw} {test or 'COND(' + pystr(question + ' -> ' + label) + ')'}:")
                render_child(kid, loops_open, ind + 1)
        if len(out) == start_len or all(o.strip().startswith("#") for o in out[start_len:]):
            emit(ind, "pass")

    def render_child(kid, loops_open: list[str], ind: int) -> None:
        if isinstance(kid, _T):
            before = len(out)
            render(kid, loops_open, ind)
            if len(out) == before:
                emit(ind, "pass")
        elif isinstance(kid, _Back):
            where = " ".join(title(kid.target).split())[:60]
            if loops_open and kid.target == loops_open[-1]:
                emit(ind, f"pass  # back to: {where}")
            else:
                emit(ind, f"break  # back to: {where} (the enclosing loop repeats)")
        else:
            emit(ind, f"pass  # continues as above at: {' '.join(title(kid.target).split())[:60]}")

    render(tree, [], 0)
    text = "\n".join(out) + "\n"

    dom = dominators(chart)
    pre: dict[str, list[str]] = {}
    for nid, act in actions.items():
        strict = [d for d in chart.reachable() if d in dom[nid] and d != nid]
        before_apis = [c for d in strict for c in actions[d].calls if c in api_names]
        for i, name in enumerate(act.calls):
            mine = before_apis + [c for c in act.calls[:i] if c in api_names]
            mine = [c for c in dict.fromkeys(mine) if c != name]
            if name in pre:
                pre[name] = [c for c in pre[name] if c in mine]  # intersection keeps the first order
            else:
                pre[name] = mine
    unreachable = [n for n in chart.nodes if n not in actions]
    return Compiled(text, pre, unreachable, loops, sorted(set(cut)))
