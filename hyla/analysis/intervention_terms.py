"""The words of the interventions' tables and figure (docs/interventions.md): a label and a one-line
definition of every split, site, condition and reference, and the transfer scale of each task."""

from __future__ import annotations

from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN

DOCS = "docs/interventions.md"
LABELS = {
    "patched": "B's codes (the patch)",
    "query_side": "leak control",
    "random_donor": "random task's codes",
    "shuffled_heads": "heads shuffled",
    "unpatched": "unpatched = 0",
    "donor_run": "B's own run = 1",
    "donor_target": "B's answer = 1",
    "constant": "constant prediction",
    "random_task": "perfect random task",
    "random_rule": "perfect random rule",
    "wrecked": "wrecked",
}
SCALE = {
    FUZZY_LOGIC: "transfer per query = (m_patched − m_A) / (m_B − m_A), m = the model's prediction for the "
    "query: 0 = the unpatched model on A's sequence, 1 = the model on B's (same inputs, B's labels)",
    SRAVEN: "transfer per query = (m_patched − m_A) / (m_B − m_A), m = the probability the model puts on "
    "the answers B's rule implies for A's last row: 0 = the unpatched model, 1 = all of it on B's answers",
}
DEFINITIONS = {  # one line per split, site, condition and reference; the last two tell the tasks apart
    "patched": "B's codes (the patch): the codes the same query computes in B's context, put into A's run",
    "query_side": "leak control: B's query state against A's keys (no example of B reaches the code via a key)",
    "shuffled_heads": "heads shuffled: B's codes with the heads permuted at random per sequence and layer",
    "unpatched": "unpatched = 0: the model on A, unchanged (the scale's 0)",
    "wrecked": "wrecked: the unpatched predictions of other queries (right distribution, no relation to this one)",
    FUZZY_LOGIC: {
        "valid": "split valid: A and B are training tasks that share one term",
        "ood": "split ood: A and B are held-out tasks (new combinations of known terms) that share one term",
        "probe": "site probe: the query's code to itself (the pair the probes read)",
        "row": "site row: the query's codes to every key",
        "random_donor": "random task's codes: the query's codes in a random third task C's context (same inputs)",
        "donor_run": "B's own run = 1: the model on B's sequence (the scale's 1)",
        "constant": "constant prediction: the mean training target for every query (the trivial answer)",
        "random_task": "perfect random task: C's exact targets (chance: a wrong task carried out perfectly)",
    },
    SRAVEN: {
        "valid": "split valid: grids A and B of valid_unpermuted (rule combinations seen in training)",
        "ood": "split ood: grids A and B of ood_unpermuted (held-out rule combinations)",
        "probe": "site probe: the answer token's codes to feature f in panels (2,0) and (2,1)",
        "row": "site row: the answer token's codes to every key",
        "random_donor": "random task's codes: the answer token's codes in a random other grid of the split",
        "donor_target": "B's answer = 1: all probability on the answers B's rule implies (the scale's 1)",
        "constant": "constant prediction: the uniform distribution over the values (chance, the trivial answer)",
        "random_rule": "perfect random rule: all probability on a random donor rule's answers (chance level of rules)",
    },
}
SHOWN_REFERENCES = ("constant", "random_task", "random_rule", "wrecked")
"""the references in the table's columns (unpatched and B's own are the scale's 0 and 1)"""


def definition(name: str, task: str) -> str:
    return DEFINITIONS[task].get(name) or DEFINITIONS[name]
