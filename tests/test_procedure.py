"""Parser tests for PDL procedures: what is accepted, the tree it yields, and what is rejected
(with the 1-based line of the offending statement)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from workflows.procedure import (Break, Call, If, Pass, ProcedureError, While, condition_names_with_lines,
                                 parse_procedure)


def parse(src: str):
    return parse_procedure(textwrap.dedent(src))


def test_assignments_and_bare_calls():
    proc = parse("""
        [a, b] = API.lookup(x, y)
        c = ANSWER.ask()
        API.notify(a)
    """)
    s1, s2, s3 = proc.steps
    assert (s1.kind, s1.name, s1.args, s1.targets, s1.line) == ("API", "lookup", ["x", "y"], ["a", "b"], 2)
    assert (s2.kind, s2.name, s2.targets) == ("ANSWER", "ask", ["c"])
    assert (s3.kind, s3.name, s3.args, s3.targets, s3.line) == ("API", "notify", ["a"], [], 4)
    assert [c.node for c in proc.calls()] == ["lookup", "ask", "notify"]


def test_tuple_targets_and_string_arguments():
    (step,) = parse('slot_a, slot_b = ANSWER.request_information("slot_a", "slot_b")').steps
    assert step.targets == ["slot_a", "slot_b"] and step.args == ["slot_a", "slot_b"]


def test_flowagent_list_arguments_are_flattened():
    (step,) = parse("[r] = API.query([name, city])").steps
    assert step.args == ["name", "city"]


def test_if_elif_else():
    proc = parse("""
        [s] = API.check()
        if s == "ok":
            ANSWER.done()
        elif s in ["late", "lost"] and not urgent:
            ANSWER.sorry()
        else:
            pass
    """)
    step = proc.steps[1]
    assert isinstance(step, If) and step.line == 3
    assert [src for _, src, _ in step.branches] == ['s == "ok"', 's in ["late", "lost"] and not urgent']
    assert [b[2][0].name for b in step.branches] == ["done", "sorry"]
    assert isinstance(step.orelse[0], Pass)
    assert isinstance(step.branches[0][0], ast.Compare)
    assert proc.condition_names() == {"s", "urgent"}
    assert condition_names_with_lines(proc) == [("s", 3), ("urgent", 5)]


def test_while_with_break():
    proc = parse("""
        [ok] = API.try_it()
        while not ok:
            [ok] = API.try_it()
            if COND("the user gives up"):
                break
    """)
    loop = proc.steps[1]
    assert isinstance(loop, While) and loop.source == "not ok" and loop.line == 3
    inner = loop.body[1]
    assert isinstance(inner, If) and isinstance(inner.branches[0][2][0], Break)


def test_cond_is_a_natural_language_condition():
    proc = parse("""
        if COND("the user is a member") or vip:
            ANSWER.discount()
    """)
    test, source, _ = proc.steps[0].branches[0]
    assert source == 'COND("the user is a member") or vip'
    assert proc.condition_names() == {"vip"}  # COND itself is not a value name


def test_comments_attach_to_the_next_call():
    proc = parse("""
        # first comment line
        # second comment line
        [a] = API.one()

        # about two
        API.two()  # inline why
        API.three()
    """)
    one, two, three = proc.calls()
    assert one.comment == "first comment line second comment line"
    assert two.comment == "about two inline why"
    assert three.comment == ""
    assert proc.comments[2] == "first comment line"


def test_blank_line_detaches_a_comment():
    proc = parse("""
        # about nothing

        API.two()
    """)
    assert proc.calls()[0].comment == ""


def test_hash_inside_a_string_is_not_a_comment():
    (step,) = parse('ANSWER.request_information("#tag")').steps
    assert step.comment == "" and step.args == ["#tag"]


def test_empty_procedure():
    assert parse("").steps == []
    assert parse("# only a comment\n").steps == []


@pytest.mark.parametrize("src, line, words", [
    ("API.a()\nimport os\n", 2, "'Import' statements are not allowed"),
    ("API.a()\nfrom x import y\n", 2, "'ImportFrom' statements are not allowed"),
    ("API.a()\n\nfor i in items:\n    API.a()\n", 3, "'For' statements are not allowed"),
    ("[r] = API.a(x=1)\n", 1, "not keywords"),
    ("API.a()\nif r.ok:\n    pass\n", 2, "'Attribute' is not allowed in a condition"),
    ("API.a()\nif x:\n    pass\nelif len(x) > 2:\n    pass\n", 4, 'only call COND("...")'),
    ("while COND(x):\n    pass\n", 1, 'only call COND("...")'),
    ("x = 1\n", 1, "only API.<name>(...) and ANSWER.<name>(...) calls"),
    ("print('hi')\n", 1, "only API.<name>(...) and ANSWER.<name>(...) calls"),
    ("API.a(f(x))\n", 1, "names or string literals"),
    ("a = b = API.a()\n", 1, "chained assignment"),
    ("[a.b] = API.a()\n", 1, "list of names"),
    ("API.a()\nwhile x:\n    pass\nelse:\n    pass\n", 2, "while ... else"),
    ("API.a()\nbreak\n", 2, "'break' outside a while loop"),
    ("API.a()\nif x\n    pass\n", 2, "does not parse"),
    ("def f():\n    pass\n", 1, "'FunctionDef' statements are not allowed"),
])
def test_rejections_carry_the_line(src, line, words):
    with pytest.raises(ProcedureError) as exc:
        parse_procedure(src)
    assert exc.value.line == line
    assert words in exc.value.message


def test_indented_block_is_dedented():
    proc = parse_procedure("    API.a()\n    if x:\n        API.b()\n")
    assert [c.name for c in proc.calls()] == ["a", "b"] and isinstance(proc.steps[0], Call)
