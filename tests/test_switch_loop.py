"""The closed-loop switching evaluation decides exactly what the compiled graph decides.

Dialogues are replayed twice: through ``evals.switch_loop`` (the understanding nodes called in the
graph's order) and through ``graph.agent.build_agent`` with an in-memory checkpointer, each turn
stopped after ``apply_commands`` and the dataset's agent message written into the thread.  The active
workflow, the turn's commands and the stack must agree turn by turn.  Also: the loop's metrics and
error categories, and ReviseFlow/VerifyFlow on the stack.
"""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from evals.datasets import Dialogue, Turn, finish_labels

DIALOGUES = [
    [("user", "I'd like to book a table at Casa Fiorella for 4 people on 2026-12-10 at 19:00", "book_table"),
     ("agent", "Could you tell me the name the booking is made under?", None),
     ("user", "Oh wait, before that: where is my order ORD-7002? My email is amelia.hart@example.com", "track_order"),
     ("agent", "Order ORD-7002 was delivered on 2026-11-06.", None),
     ("user", "Thanks. Now back to my table booking", "book_table"),
     ("agent", "Sure, back to book a table. Could you tell me the name the booking is made under?", None),
     ("user", "The name is Amelia Hart", "book_table")],
    [("user", "What's my account balance?", "check_balance"),
     ("agent", "To check a balance I need your customer number, your 4-digit PIN and the account.", None),
     ("user", "C-1001, PIN 4821, checking", "check_balance"),
     ("agent", "Your checking balance is 2481.37 EUR. Anything else?", None),
     ("user", "my card was stolen, block it please", "block_card"),
     ("agent", "Which card, and your customer number?", None),
     ("user", "never mind", None)],
]


def _dialogue(i: int, rows) -> Dialogue:
    return finish_labels(Dialogue(f"d{i}", [Turn(s, t, g) for s, t, g in rows]))


def _graph_decisions(agent, rows) -> list[tuple]:
    from graph.state import active_workflow, turn_commands

    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = []
    for speaker, text, _ in rows:
        if speaker == "agent":
            agent.update_state(config, {"messages": [AIMessage(text)]})
            continue
        agent.invoke({"messages": [HumanMessage(text)]}, config, interrupt_after=["apply_commands"])
        state = agent.get_state(config).values
        out.append((active_workflow(state), [c["command"] for c in turn_commands(state)],
                    [(f["workflow"], f["status"]) for f in state.get("stack") or []]))
    return out


def _loop_decisions(loop, rows) -> list[tuple]:
    from graph.state import active_workflow, turn_commands

    state: dict = {"messages": []}
    out = []
    for speaker, text, _ in rows:
        if speaker == "agent":
            state = loop.agent_turn(state, text)
            continue
        state = loop.user_turn(state, text)
        out.append((active_workflow(state), [c["command"] for c in turn_commands(state)],
                    [(f["workflow"], f["status"]) for f in state.get("stack") or []]))
    return out


def test_the_evaluation_decides_what_the_compiled_graph_decides(agent_context):
    from langgraph.checkpoint.memory import InMemorySaver

    from evals.switch_loop import UnderstandingLoop, replay
    from graph.agent import build_agent

    agent = build_agent(agent_context, checkpointer=InMemorySaver())
    loop = UnderstandingLoop(agent_context)
    for i, rows in enumerate(DIALOGUES):
        graph = _graph_decisions(agent, rows)
        assert graph == _loop_decisions(loop, rows), f"dialogue {i}"
        turns = replay(loop, _dialogue(i, rows))
        assert [t.active for t in turns] == [g[0] for g in graph]
    # the digression is taken and the booking resumed (the agent's own decisions, closed loop)
    first = _loop_decisions(loop, DIALOGUES[0])
    assert [d[0] for d in first] == ["book_table", "track_order", "book_table", "book_table"]


def test_metrics_and_error_categories():
    from evals.switch_loop import LoopTurn, error_category, loop_metrics

    def t(gold, prev, before, active, decision="STAY", first=False, revised=False):
        return LoopTurn("d", 0, gold, prev, before, active, decision, [], [], False, revised, first, 1.0)

    turns = [t("A", None, None, "B", "SEARCH", first=True),  # wrong pick at the change
             t("A", "A", "B", "B"),  # stayed on a wrong pick
             t("C", "A", "B", "B"),  # missed change
             t("C", "C", "C", "D", "SEARCH"),  # needless search
             t("C", "C", "D", "C", revised=True)]  # revised: right
    assert [error_category(x) for x in turns] == ["wrong pick at the change", "stayed on a wrong pick",
                                                  "missed change", "needless search", None]
    m = loop_metrics(turns)
    assert m["top1"] == pytest.approx(0.2) and m["errors"] == 4
    assert m["error_shares"]["missed change"] == pytest.approx(0.25)
    assert m["switch_recall"] == pytest.approx(0.5) and m["switch_recall_no_first"] == pytest.approx(0.0)


def test_a_turn_without_a_search_is_ranked_by_the_active_picks_belief():
    """MAP@5 reads the agent's ranking: after a STAY, the active workflow and then the alternatives its
    belief still holds, most probable first; ``map_active_only`` keeps the active workflow alone there."""
    from dialogue.frames import new_frame
    from evals.switch_loop import LoopTurn, believed, loop_metrics, to_record

    frame = {**new_frame("book_table", 1), "belief": {"book_table": -0.2, "track_order": -3.0, "cancel_order": -1.1}}
    ranking = believed({"stack": [frame]})
    assert ranking == ["book_table", "cancel_order", "track_order"] and believed({"stack": []}) == []
    stay = LoopTurn("d", 1, "cancel_order", "book_table", "book_table", "book_table", "STAY", [], ranking,
                    False, False, False, 1.0)
    search = LoopTurn("d", 2, "track_order", "book_table", "book_table", "book_table", "SEARCH", [],
                      ["book_table", "track_order"], False, False, False, 1.0)
    assert to_record(stay).predicted == ranking
    m = loop_metrics([stay, search])
    assert m["top1"] == 0.0
    assert m["map"] == pytest.approx((1 / 2 + 1 / 2) / 2) and m["map_active_only"] == pytest.approx((0 + 1 / 2) / 2)


def test_revise_flow_replaces_the_frame_and_keeps_fitting_slots():
    from dialogue.commands import ReviseFlow, VerifyFlow, apply_all
    from dialogue.frames import new_frame
    from dialogue.turn import make_env
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    env = make_env(3, lib.workflows, {})
    below = new_frame("check_balance", 1)
    below["status"] = "interrupted"
    frame = new_frame("cancel_order", 2, {"order_id": "ORD-7001", "reason": "late"})
    stack = apply_all([below, frame], [VerifyFlow(workflow="cancel_order", belief={"cancel_order": -0.1,
                                                                                   "track_order": -2.0}, turn=3)], env)
    assert stack[-1]["belief"]["track_order"] == -2.0 and stack[-1]["id"] == frame["id"]
    stack = apply_all(stack, [ReviseFlow(workflow="track_order", previous="cancel_order", turn=3)], env)
    top = stack[-1]
    assert top["workflow"] == "track_order" and top["status"] == "active" and top["started"] == 2
    assert top["slots"] == {"order_id": "ORD-7001"}  # "reason" is not a slot of track_order
    assert top["belief"]["track_order"] == -2.0 and stack[0]["workflow"] == "check_balance"
    # a revision of a workflow that is not the active one does nothing
    assert apply_all(stack, [ReviseFlow(workflow="book_table", previous="cancel_order", turn=4)], env) == stack


def test_correction_is_recognised():
    from dialogue.understanding.belief import is_correction

    assert is_correction("No, I meant the reservation, not the search")
    assert is_correction("that's not what I asked, I want to track it")
    assert not is_correction("No thanks, that's all")


def test_default_configuration_is_the_one_chosen_on_train():
    from dialogue.understanding.ranker import FEATURES, load_ranker
    from evals.switch_loop import chosen_on_train
    from graph.context import Context

    ranker = load_ranker()
    assert ranker is not None and len(ranker.weights) == len(FEATURES)
    label, overrides = chosen_on_train()
    assert label and isinstance(overrides, dict)
    ctx = Context()
    assert {k: getattr(ctx, k) for k in overrides} == overrides, f"Context defaults differ from {label!r}"


def test_a_revision_needs_a_word_of_the_other_task_in_the_turn():
    from dialogue.understanding.belief import speaks_of
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    assert not speaks_of("Sure, Ben Stone", lib, "change_booking", "book_table")  # answers the question
    assert speaks_of("no, I meant move my existing booking reference", lib, "change_booking", "book_table")


def test_the_verifier_has_its_own_weights_and_they_decide_a_revision():
    from dialogue.understanding.belief import reverify
    from dialogue.understanding.ranker import FEATURES, Ranker, evidence, load_ranker
    from workflows.library import bundled_library_path, load_library

    bundled = load_ranker()
    assert bundled is not None and len(bundled.verify) == len(FEATURES)  # fitted by `flowdesk train switch`
    assert bundled.verifier().weights == bundled.verify
    lib = load_library(bundled_library_path())
    ev = evidence("please block my card", "What is your account number?", [("check_balance", 1.0)])
    belief = {"check_balance": -0.4, "block_card": -1.2}
    zero = tuple(0.0 for _ in FEATURES)
    names = tuple(4.0 if k == "names_task" else 0.0 for k in FEATURES)
    # Without verify weights the ranker's own (here: none) re-verify: the evidence is flat, the pick holds.
    assert reverify(Ranker(zero, 0.0, revise_margin=0.5), ev, lib, "check_balance", [], belief)[1] is None
    # The verifier's weights read the turn naming the other task: the pick is revised.
    updated, target = reverify(Ranker(zero, 0.0, revise_margin=0.5, verify=names), ev, lib, "check_balance", [],
                               belief)
    assert target == "block_card" and updated["block_card"] > updated["check_balance"]


def test_since_pick_reads_the_turns_from_the_pick_on():
    from dialogue.understanding.belief import since_pick

    msgs = [HumanMessage("what's my balance"), AIMessage("Your customer number?"), HumanMessage("C-1001"),
            AIMessage("Your PIN?"), HumanMessage("4821"), AIMessage("Which account?"), HumanMessage("checking")]
    assert since_pick(msgs, 2) == ("C-1001 4821 checking", "Your PIN? Which account?")
    assert since_pick(msgs, 1, last=2)[0] == "4821 checking"


def _reviser_rows(ctx, text: str):
    from dialogue.frames import new_frame
    from dialogue.understanding.belief import reviser_rows
    from dialogue.understanding.ranker import evidence, load_ranker
    from graph.resources import get_resources
    from nodes.detector import dense_scorer, retriever_scorer

    res = get_resources(ctx)
    frame = {**new_frame("check_balance", 1), "belief": {"check_balance": -0.4, "block_card": -1.2}}
    question = "What is your customer number?"
    msgs = [HumanMessage("I need help with my account"), AIMessage(question), HumanMessage(text)]
    scorer = retriever_scorer(res.retriever)
    return dict(reviser_rows(load_ranker(), frame, evidence(text, question, scorer(text)), msgs, res.library,
                             scorer, ["check_balance"], frame["belief"], dense_scorer(res.retriever)))


def test_the_reviser_compares_each_alternative_with_the_active_pick(agent_context):
    from dialogue.understanding.belief import ANSWER, REVISER_FEATURES, revise_choice

    rows = _reviser_rows(agent_context, "my card was stolen, please block it")
    assert "block_card" in rows and "check_balance" not in rows  # alternatives only, the belief's among them
    assert set(rows["block_card"]) == set(REVISER_FEATURES)
    # the turn's words and its embedding favour blocking the card over the balance
    assert rows["block_card"]["dense_acc_gap"] > 0 and rows["block_card"]["speaks_turn"] == 1.0
    quiet = _reviser_rows(agent_context, "C-1001")["block_card"]
    assert quiet["speaks_turn"] == 0.0 and quiet["dense_acc_gap"] < rows["block_card"]["dense_acc_gap"]
    # a reviser fitted on the dense gap alone revises on the first turn and not on the answer
    import lightgbm as lgb
    import numpy as np

    i = REVISER_FEATURES.index("dense_acc_gap")
    X = np.zeros((200, len(REVISER_FEATURES)))
    X[:, i] = np.linspace(-0.5, 0.5, 200)
    y = (X[:, i] > 0.05).astype(int)
    booster = lgb.LGBMClassifier(n_estimators=20, min_child_samples=5, verbose=-1).fit(X, y).booster_
    reviser = {"booster": booster.model_to_string(), "threshold": 0.5}
    strong = {**quiet, "dense_acc_gap": 0.3, "speaks_turn": 1.0}
    weak = {**quiet, "dense_acc_gap": -0.2}
    assert revise_choice(reviser, [("transfer_money", weak), ("block_card", strong)])[0] == "block_card"
    assert revise_choice(reviser, [("block_card", weak)])[0] is None
    assert revise_choice({**reviser, "threshold": 0.999}, [("block_card", strong)])[0] is None
    # an alternative the turn does not speak of needs the second threshold; without one it is never chosen
    unspoken = {**strong, "speaks_turn": 0.0}
    assert revise_choice(reviser, [("block_card", unspoken)])[0] is None
    assert revise_choice({**reviser, "threshold_unspoken": 0.5}, [("block_card", unspoken)])[0] == "block_card"
    assert revise_choice({**reviser, "threshold_unspoken": 0.999}, [("block_card", unspoken)])[0] is None
    # one that only what was said before an answer points to needs the third; without one, never
    answered = {**unspoken, ANSWER: 1.0}
    assert revise_choice({**reviser, "threshold_unspoken": 0.5}, [("block_card", answered)])[0] is None
    assert revise_choice({**reviser, "threshold_answer": 0.5}, [("block_card", answered)])[0] == "block_card"
    assert revise_choice({**reviser, "threshold_answer": 0.999}, [("block_card", answered)])[0] is None


def test_an_answer_to_the_pending_yes_no_question_is_not_revised(agent_context):
    """The active procedure asked a yes/no question and the user answers it: the procedure progresses as
    expected, so the words after the answer do not overturn the pick — unless the user corrects it or
    also asks for something."""
    from dialogue.frames import new_frame
    from dialogue.understanding.belief import answers_question, revision_commands
    from dialogue.understanding.ranker import evidence, load_ranker
    from graph.resources import get_resources
    from nodes.detector import dense_scorer, retriever_scorer

    res = get_resources(agent_context)
    scorer = retriever_scorer(res.retriever)
    question = "Is it the checking account? (yes/no)"

    def commands(text: str, asked: list[str]) -> list[str]:
        frame = {**new_frame("check_balance", 1), "belief": {"check_balance": -0.4, "block_card": -1.2},
                 "asked": asked}
        msgs = [HumanMessage("I need help with my account"), AIMessage(question), HumanMessage(text)]
        return [c.command for c in revision_commands(load_ranker(), frame, evidence(text, question, scorer(text)),
                                                     res.library, ["check_balance"], 2, [], msgs, scorer,
                                                     dense_scorer(res.retriever))]

    stolen = "no, my card was stolen, it is gone"
    assert commands(stolen, []) == ["revise_flow"]  # nothing asked: the turn's words decide
    assert answers_question({"asked": ["cond_0a1b2c3d"]}, stolen)
    assert commands(stolen, ["cond_0a1b2c3d"]) == []  # the answer to the question asked
    assert commands("No, I meant block my card, it was stolen", ["cond_0a1b2c3d"]) == ["revise_flow"]
    assert commands("yes, and can you block my card, it was stolen", ["cond_0a1b2c3d"]) == ["revise_flow"]
    assert not answers_question({"asked": ["account"]}, stolen)  # a slot question: not a yes/no answer
    assert not answers_question({"asked": ["cond_0a1b2c3d"]}, "no, my card was stolen, please block it")  # asks


def test_the_reviser_is_trained_on_the_rows_it_scores(agent_context):
    """``reviser_candidates`` is the one filter between ``reviser_rows`` and the reviser, at serve time and
    for the training rows: none on an answer to a yes/no question; on a turn that follows a question (the
    procedure's own) only the alternatives the turn speaks of; after a question only the agent's words ask,
    the alternatives the turn does not speak of are marked ``ANSWER`` (their own threshold); every
    alternative unmarked otherwise (the reviser's thresholds then tell the alternatives the turn speaks of
    from the others)."""
    from dialogue.frames import new_frame
    from dialogue.understanding.belief import ANSWER, is_correction, reviser_candidates
    from dialogue.understanding.ranker import evidence, load_ranker
    from graph.resources import get_resources
    from nodes.detector import dense_scorer, retriever_scorer

    res = get_resources(agent_context)
    scorer = retriever_scorer(res.retriever)

    def names(text: str, asked: list[str], question: str = "Is it the checking account? (yes/no)") -> list[str]:
        """The alternatives weighed without the answer's threshold."""
        frame = {**new_frame("check_balance", 1), "belief": {"check_balance": -0.4, "block_card": -1.2},
                 "asked": asked}
        msgs = [HumanMessage("I need help with my account"), AIMessage(question), HumanMessage(text)]
        rows = reviser_candidates(load_ranker(), frame, evidence(text, question, scorer(text)), msgs, res.library,
                                  scorer, ["check_balance"], frame["belief"], dense_scorer(res.retriever))
        if asked or is_correction(text):  # the procedure's own question, or a corrected value: spoken only
            assert all(f["speaks_turn"] == 1.0 and f[ANSWER] == 0.0 for _, f in rows)
        assert all(f[ANSWER] == float("?" in question and not f["speaks_turn"]) for _, f in rows)
        return [n for n, f in rows if not f[ANSWER]]

    assert "block_card" in names("my card was stolen, please block it", [])
    assert "block_card" in names("my card was stolen, please block it", ["account_type"])
    assert names("C-1001", ["customer_id"]) == []  # the answer to the value asked names no other task
    assert names("C-1001", [], "What is your customer number?") == []  # the agent's own question
    assert "block_card" in names("C-1001", [], "Here is what I found.")
    assert names("wait, I meant C-1001", [], "Here is what I found.") == []  # a corrected value, not the pick
    assert names("no, my card was stolen, it is gone", ["cond_0a1b2c3d"]) == []


def test_the_boosted_pick_model_orders_a_search_and_the_belief_keeps_the_linear_scores():
    import random

    from dialogue.understanding.ranker import FEATURES, ROW_FEATURES, Ranker, evidence
    from evals.switch_train import fit_pick, pick_model
    from workflows.library import bundled_library_path, load_library

    # Rows where only an interaction decides: on turns of one kind (a per-turn flag, the same for every
    # candidate) the gold is BM25's top, on the other the dense top; a candidate that is both is never the
    # gold.  No linear weights tell these apart (the flag only shifts every score).
    rng = random.Random(0)
    patterns = [(1.0, 0.0), (0.0, 1.0), (0.0, 0.0), (1.0, 1.0)]
    per_dialogue = []
    for d in range(60):
        X, y, g = [], [], []
        for t in range(4):
            flag = float(rng.random() < 0.5)
            for names, slot in rng.sample(patterns, 4):
                f = dict.fromkeys(ROW_FEATURES, 0.0)
                f["lex_top"], f["den_top"], f["same_role"], f["lex_norm"] = names, slot, flag, rng.random()
                X.append([f[k] for k in ROW_FEATURES])
                y.append(int((names, slot) == ((1.0, 0.0) if flag else (0.0, 1.0))))
                g.append(t)
        per_dialogue.append((X, y, g, [f"x:service{d % 7}"] * len(y)))
    pick = pick_model(per_dialogue)
    assert pick["held_out"]["pick_accuracy"] > pick["held_out"]["pick_accuracy_logistic"]
    assert pick["held_out"]["pick_accuracy"] > 0.9
    # the interaction holds in every service, so the folds that leave services out keep the trees
    acc = {float(b): a for b, a in pick["blend_folds"]["accuracy"].items()}
    assert pick["blend_folds"]["services"] == 7 and pick["blend"] > 0.0
    assert acc[pick["blend"]] >= acc[1.0] > acc[0.0]
    assert pick["held_out"]["pick_accuracy_blend"] > pick["held_out"]["pick_accuracy_logistic"]

    lib = load_library(bundled_library_path())
    zero = tuple(0.0 for _ in FEATURES)
    linear = Ranker(zero, 0.0, meta={"ranker": {"pick": fit_pick(*per_dialogue[0][:3])}})
    assert linear.booster == "" and linear.picker().booster  # only the pick at a search uses the trees
    ev = evidence("please block my card", "", [("block_card", 1.0), ("check_balance", 0.9)])
    assert {s for _, s in linear.scores(ev, lib, None, [])} == {0.0}  # the belief's scores stay linear
    assert len(linear.picker().scores(ev, lib, None, [])) == 2


def test_the_pick_blend_is_chosen_on_services_left_out():
    """Where the trees can only memorise each service's quirk (a feature that picks the gold in the services
    they saw and misleads in the others) and one linear feature carries everywhere, the folds that leave
    whole services out choose a small share of trees; ``Ranker.picker`` scores with that share."""
    import random

    from dialogue.understanding.ranker import FEATURES, ROW_FEATURES, Ranker, evidence
    from evals.switch_train import blend_folds, fit_pick
    from workflows.library import bundled_library_path, load_library

    rng = random.Random(1)
    rows = []
    for d in range(100):
        service = d % 10
        X, y, g = [], [], []
        for t in range(3):
            gold = rng.randrange(5)
            for c in range(5):
                f = dict.fromkeys(ROW_FEATURES, 0.0)
                # a noisy feature that carries: the gold scores higher on average
                f["lex_norm"] = rng.random() + (0.6 if c == gold else 0.0)
                # a quirk: within a service, a value band marks the gold exactly; the band differs per service
                band = (service + (0 if c == gold else 1 + rng.randrange(9))) % 10
                f["den_z"] = band / 10 + rng.random() * 0.05
                X.append([f[k] for k in ROW_FEATURES])
                y.append(int(c == gold))
                g.append(t)
        rows.append((X, y, g, [f"x:service{service}"] * len(y)))
    folds = blend_folds(rows)
    acc = {float(b): a for b, a in folds["accuracy"].items()}
    assert folds["services"] == 10
    assert acc[0.0] > acc[1.0]  # the trees alone do not carry to the services they never saw
    assert folds["chosen"] < 1.0 and acc[folds["chosen"]] == max(acc.values())

    lib = load_library(bundled_library_path())
    booster = fit_pick(*rows[0][:3])
    weights = tuple(1.0 if k == "lex_norm" else 0.0 for k in FEATURES)
    ev = evidence("please block my card", "", [("block_card", 1.0), ("check_balance", 0.5)])
    linear = Ranker(weights, 0.0).scores(ev, lib, None, [])
    blended = Ranker(weights, 0.0, meta={"ranker": {"pick": {**booster, "blend": 0.0}}}).picker()
    assert blended.booster and blended.blend == 0.0
    assert blended.scores(ev, lib, None, []) == linear  # a share of 0 is the linear order


def test_the_pick_model_never_reads_what_the_turn_says_of_a_candidate_against_it():
    """Rows where a full slot-word cover happens to go with the wrong candidate: the trees still may not
    score a candidate lower because the turn says more of it (``PICK_MONOTONE``)."""
    import random

    import lightgbm as lgb
    import numpy as np

    from dialogue.understanding.ranker import PICK_FEATURES, ROW_FEATURES
    from evals.switch_train import _columns, fit_pick

    rng = random.Random(2)
    X, y, g = [], [], []
    for t in range(300):
        gold = rng.randrange(4)
        for c in range(4):
            f = dict.fromkeys(ROW_FEATURES, 0.0)
            f["lex_norm"] = rng.random() + (0.5 if c == gold else 0.0)
            f["slot_share"] = 0.0 if c == gold else float(rng.random() < 0.7)
            X.append([f[k] for k in ROW_FEATURES])
            y.append(int(c == gold))
            g.append(t)
    booster = lgb.Booster(model_str=fit_pick(X, y, g)["booster"])
    names = booster.feature_name()  # PICK_FEATURES but the association's columns the rows never filled
    assert set(names) <= set(PICK_FEATURES) and "slot_share" in names
    base = _columns(X[:40], names)
    covered = base.copy()
    covered[:, names.index("slot_share")] = 1.0
    assert (booster.predict(covered) >= booster.predict(base) - 1e-9).all()


def test_the_pick_model_reads_retrieval_relative_to_the_library():
    """A library whose cosines all sit lower (a small desk) gives the pick model the same dense and BM25
    evidence as one whose cosines sit higher: z-scores over the candidate rankings, no raw cosine."""
    from dialogue.understanding.ranker import PICK_FEATURES, evidence, features
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    names = ["refund_order", "return_item", "cancel_order", "track_order"]
    dense = [0.57, 0.52, 0.42, 0.30]
    lex = [9.0, 6.0, 2.0, 1.0]

    def row(scale: float, shift: float, name: str) -> dict[str, float]:
        ev = evidence("I would like a refund", "", list(zip(names, dense)), list(zip(names, [scale * s for s in lex])),
                      list(zip(names, [scale * s + shift for s in dense])))
        return features(name, ev, lib, None, [])

    assert not {"den_raw", "den_margin"} & set(PICK_FEATURES) and {"den_z", "lex_z"} <= set(PICK_FEATURES)
    for name in names:
        high, low = row(1.0, 0.0, name), row(0.5, -0.2, name)
        assert high["den_raw"] != low["den_raw"]
        assert abs(high["den_z"] - low["den_z"]) < 1e-9 and abs(high["lex_z"] - low["lex_z"]) < 1e-9
    assert row(1.0, 0.0, "refund_order")["den_z"] > row(1.0, 0.0, "track_order")["den_z"]



def test_the_pick_model_reads_a_candidates_place_in_its_role():
    """``ROLE_PLACE``: whether a candidate commits something (an irreversible API), whether its role also
    holds workflows that do not, and whether the turn asks for information rather than requests an action —
    read from the library's own flags, the same for any desk."""
    from dialogue.understanding.ranker import PICK_FEATURES, ROLE_PLACE, evidence, features
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    wfs = lib.workflows
    assert set(ROLE_PLACE) <= set(PICK_FEATURES)
    names = ["transfer_money", "check_balance", "track_order", "cancel_order"]

    def row(text: str, name: str) -> dict[str, float]:
        return features(name, evidence(text, "", [(n, 1.0) for n in names]), lib, None, [])

    for name in names:
        f = row("how much is in my savings?", name)
        assert f["commits"] == float(any(a.irreversible for a in wfs[name].apis))
        kinds = {any(a.irreversible for a in w.apis) for w in lib.workflows_of(wfs[name].role)}
        assert f["role_mixed"] == float(len(kinds) == 2)
    assert row("how much is in my savings?", "transfer_money")["commits"] == 1.0
    assert row("how much is in my savings?", "check_balance")["commits"] == 0.0
    assert row("how much is in my savings?", "check_balance")["role_mixed"] == 1.0
    assert row("how much is in my savings?", "check_balance")["turn_asks"] == 1.0
    # a request put as a question is still a request
    assert row("can you move 50 euros to my checking?", "transfer_money")["turn_asks"] == 0.0
    assert row("I need to send money to my checking account", "transfer_money")["turn_asks"] == 0.0

def test_the_dense_z_score_divides_by_at_least_the_floor_fitted_on_train():
    """``den_z`` divides by the larger of the turn's dense sd and the model's floor (a high quantile of the train
    turns' sd, ``evals.switch_train.den_sd_floor``, stored as ``ranker.pick.den_sd_floor``): a small desk's few
    near-tied candidates are not blown apart into large gaps, while a shift of every cosine (a library whose
    cosines sit lower) still changes nothing, and neither does a scale when the spread exceeds the floor."""
    import numpy as np

    from dialogue.understanding.ranker import FEATURES, ROW_FEATURES, Ranker, evidence, features
    from evals.switch_train import den_sd_floor
    from workflows.library import bundled_library_path, load_library

    lib = load_library(bundled_library_path())
    names = ["refund_order", "return_item", "cancel_order", "track_order"]

    def den_z(dense: list[float], floor: float) -> list[float]:
        ev = evidence("where is my order", "", list(zip(names, dense)), None, list(zip(names, dense)))
        return [features(n, ev, lib, None, [], floor)["den_z"] for n in names]

    tied = [0.51, 0.50, 0.49, 0.48]  # sd 0.011
    assert max(den_z(tied, 0.0)) > 1.0  # a plain z-score reads a 0.015 cosine lead as > 1 sd
    assert max(den_z(tied, 0.16)) < 0.1
    assert np.allclose(den_z(tied, 0.16), den_z([v - 0.2 for v in tied], 0.16))
    wide = [0.9, 0.5, 0.3, 0.1]  # sd 0.29, above the floor
    assert np.allclose(den_z(wide, 0.16), den_z([2 * v - 0.3 for v in wide], 0.16))
    assert np.allclose(den_z(wide, 0.16), den_z(wide, 0.0))

    # the floor is a high quantile of the train turns' spreads; den_z is rescaled as the features would give it
    ev = evidence("where is my order", "", list(zip(names, tied)), None, list(zip(names, tied)))
    row = features("refund_order", ev, lib, None, [])
    assert abs(row["den_sd"] - float(np.std(tied))) < 1e-9
    rows = [([[row[k] for k in ROW_FEATURES]], [1], [0], ["x:a"]),
            ([[{**row, "den_sd": 0.2}[k] for k in ROW_FEATURES]], [1], [0], ["x:b"])]
    floor, scaled = den_sd_floor(rows)
    assert 0.19 < floor < 0.2
    iz = ROW_FEATURES.index("den_z")
    assert abs(scaled[0][0][0][iz] - features("refund_order", ev, lib, None, [], floor)["den_z"]) < 1e-9
    assert scaled[1][0][0][iz] == row["den_z"]  # a turn spreading more than the floor keeps its z-score
    pick = Ranker(tuple(0.0 for _ in FEATURES), 0.0, meta={"ranker": {"pick": {"booster": "x", "den_sd_floor": floor}}})
    assert pick.picker().den_floor == floor


def test_the_detector_trees_learn_where_searching_and_staying_end_differently(agent_context, tmp_path):
    """``detector_rows_closed_loop`` runs each turn the detector's score decides on from the same state both
    ways (detector forced to search / to stay): a row only where one of them ends on the gold, labelled 1
    when it is the search; with the same agent both ways nothing differs and no row is kept."""
    import json
    from dataclasses import replace

    from dialogue.understanding.policy_offline import DETECTOR_FEATURES
    from dialogue.understanding.ranker import MODEL_PATH
    from evals.switch_train import detector_rows_closed_loop, forced_detector_models

    model = json.loads(MODEL_PATH.read_text(encoding="utf-8"))
    forced = forced_detector_models(model, model["detector"], tmp_path)
    search, stay = (replace(agent_context, switch_model=str(forced[k])) for k in ("search", "stay"))
    recording = tmp_path / "recording.json"  # the agent as configured, recording the trees' rows
    recording.write_text(json.dumps({**model, "detector": {**model["detector"], "record_row": True}}), "utf-8")
    agent = replace(agent_context, switch_model=str(recording))
    dialogues = [_dialogue(i, rows) for i, rows in enumerate(DIALOGUES)]
    assert detector_rows_closed_loop(dialogues, agent, agent, agent) == ([], [])
    groups: list = []
    X, y = detector_rows_closed_loop(dialogues, agent, search, stay, groups=groups)
    assert len(X) == len(y) and all(len(r) == len(DETECTOR_FEATURES) for r in X) and set(y) <= {0, 1}
    # each row names its dialogue (folds by dialogue for ``--detector-tune``), in the dialogues' order
    assert len(groups) == len(y) and groups == sorted(groups) and set(groups) <= set(range(len(dialogues)))
    # the forced copies do what they say on a turn the score decides
    from evals.switch_loop import UnderstandingLoop
    from graph.state import decision, turn_commands

    state = UnderstandingLoop(agent_context).user_turn({"messages": []}, "What's my account balance?")
    state = UnderstandingLoop(agent_context).agent_turn(state, "Your checking balance is 2481.37 EUR.")
    turn = "How much is in my savings then?"
    outcomes = {k: decision(turn_commands(UnderstandingLoop(c).user_turn(state, turn))) for k, c in
                (("search", search), ("stay", stay))}
    assert outcomes == {"search": "SEARCH", "stay": "STAY"}
    # the row the trees learn from is in the turn's trace only when the model asks for it (``record_row``)
    rows = {}
    for name, c in (("recording", agent), ("default", agent_context)):
        after = UnderstandingLoop(c).user_turn(state, turn)
        rows[name] = next(e for e in reversed(after["trace"]) if e.get("event") == "user").get("detector_row")
    assert set(rows["recording"]) == set(DETECTOR_FEATURES) and rows["default"] is None


def test_detector_tuning_chooses_the_grid_entry_with_the_lowest_held_out_log_loss():
    """``tune_detector_trees`` scores every grid entry over folds by dialogue and keeps the lowest log loss:
    on rows where one feature decides with noise, the kept entry is in the grid, its loss is the minimum,
    and fitting with it records those parameters."""
    import json
    import random

    from dialogue.understanding.policy_offline import DETECTOR_FEATURES
    from evals.switch_train import DETECTOR_TUNE_GRID, fit_detector_trees, tune_detector_trees

    rng = random.Random(0)
    X = [[rng.random() for _ in DETECTOR_FEATURES] for _ in range(400)]
    y = [int(r[0] + 0.4 * rng.random() > 0.7) for r in X]
    tuned = tune_detector_trees(X, y, [i // 4 for i in range(400)])
    assert len(tuned["log_loss"]) == len(DETECTOR_TUNE_GRID)
    over = {k: tuned["params"][k] for k in DETECTOR_TUNE_GRID[0]}
    assert over in DETECTOR_TUNE_GRID
    assert tuned["log_loss"][json.dumps(over, sort_keys=True)] == min(tuned["log_loss"].values())
    assert fit_detector_trees(X, y, tuned["params"])["params"] == tuned["params"]


def test_detector_training_names_an_unknown_mode_before_any_work(tmp_path):
    """``--detector-modes`` with a name that is no way of using the trees is refused up front (the model file
    is not even read), naming the bad mode and the choices."""
    import typer

    from evals.switch_train import DETECTOR_MODES, train_detector

    with pytest.raises(typer.BadParameter) as err:
        train_detector(tmp_path, tmp_path / "missing.json", {}, {}, tmp_path, modes=("replace", "vetoo"))
    assert "vetoo" in str(err.value) and all(m in str(err.value) for m in DETECTOR_MODES)


def test_cached_training_rows_are_keyed_by_the_code_that_made_them():
    """``_code_key`` changes with a value and with a function's source, so a cache written by older code is not
    read by newer code."""
    from evals import switch_train
    from evals.switch_train import _code_key

    def one():
        return 1

    def two():
        return 2

    assert _code_key({"a": 1}, one) == _code_key({"a": 1}, one)
    assert _code_key({"a": 1}, one) != _code_key({"a": 2}, one) != _code_key({"a": 1}, two)
    assert len({_code_key(m) for m in switch_train._understanding_modules()}) == len(switch_train._understanding_modules())


def test_the_pick_share_is_chosen_closed_loop_on_train(tmp_path, monkeypatch):
    """``choose_blend`` scores each share with the model's own pick (only the share changed) closed loop on the
    held-out train sample and writes the best mean top-1 into the model, a tie going to the smaller share; the
    rest of the model (its pick's booster, the linear weights) is kept."""
    import json

    from evals import switch_train

    model = {"ranker": {"weights": {"is_active": 3.0}, "bias": 0.0,
                        "pick": {"booster": "trees", "blend": 0.5, "den_sd_floor": 0.1}}}
    path = tmp_path / "switch_model.json"
    path.write_text(json.dumps(model), encoding="utf-8")
    seen: list = []

    def scored(loaded, cache, model_file, **over):
        pick = json.loads(model_file.read_text(encoding="utf-8"))["ranker"]["pick"]
        seen.append((pick["blend"], pick["booster"], over))
        top1 = {0.5: 0.70, 0.6: 0.72, 0.7: 0.72, 1.0: 0.69}[pick["blend"]]
        return {"per_dataset": {"sgd": {"top1": top1}, "star": {"top1": top1}}, "top1_mean": top1}

    monkeypatch.setattr(switch_train, "closed_loop_on_train", scored)
    monkeypatch.setattr(switch_train, "blend_loop_sample", lambda data, cache: {"sgd": ("lib", []), "star": ("lib", [])})
    record = switch_train.choose_blend(tmp_path, path, (0.5, 0.7, 0.6, 1.0), tmp_path / "cache")
    assert [b for b, *_ in seen] == [0.5, 0.7, 0.6, 1.0]
    assert all(booster == "trees" and over == {} for _, booster, over in seen)  # the agent's default configuration
    assert record["chosen"] == 0.6  # 0.6 and 0.7 tie: the smaller share
    written = json.loads(path.read_text(encoding="utf-8"))["ranker"]
    assert written["pick"]["blend"] == 0.6 and written["pick"]["booster"] == "trees"
    assert written["pick"]["blend_closed_loop"]["candidates"]["1"]["top1_mean"] == 0.69
    assert written["weights"] == {"is_active": 3.0}


def test_the_share_is_chosen_on_train_dialogues_the_pick_rows_never_read():
    """``BLEND_LOOP`` holds out every dialogue ``pick_samples`` reads (SGD's and STAR's)."""
    from evals.switch_train import BLEND_LOOP, pick_samples

    full = list(range(1000))
    for name in ("sgd", "star"):
        assert not set(full[BLEND_LOOP[name]]) & set(pick_samples(full, name, 20, 3))
        assert full[BLEND_LOOP[name]]
