"""Exercise 5's checks: the student's answers.yaml against a rerun of the controller.

The lab's default topology (fat-tree k=4, 8 workers, RAT) is computed again offline, before
and after the student's failed link, so any link on an active tree is a right answer; an
expected value is never printed (it is the answer).
"""

from __future__ import annotations

from agglab.exercise_kit import result
from agglab.ground.runspec import RunSpec

TITLE = "Link failures: find the active tree, cut it, explain the epoch change"
MINUTES = 45
FILES = ()
REGIONS = ()
EXTRA = ("answers.yaml",)


def checks(work) -> list[dict]:
    """answers.yaml against a rerun of the controller's reroute on the lab's default topology."""
    import yaml  # lazy: PyYAML, only checks() needs it (`agglab exercise list` loads check.py for its title)

    from agglab.controller import topologies  # lazy: loads networkx, PyYAML, only checks() needs it (`agglab exercise list` loads check.py for its title)
    from agglab.controller.trees import compute  # lazy: loads networkx, only checks() needs it (`agglab exercise list` loads check.py for its title)

    path = work / "answers.yaml"
    try:
        ans = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return [result("answers.yaml readable", False, str(exc))]
    spec = RunSpec(workers=8, topology="fattree", tree="rat")
    g = topologies.for_run(spec)
    before = compute(spec.tree, g, epoch=0)
    out = []

    def same(field: str, got, want, why: str) -> None:
        if got is None or got == []:
            out.append(result(field, False, f"{field} is not answered yet ({why})"))
        else:            # the expected value is not printed: it is the answer
            ok = got == want
            out.append(result(field, ok, "" if ok else f"{field}: {got!r} does not match a rerun of the "
                                                       f"controller with your failed_link ({why})"))

    same("epoch_before", ans.get("epoch_before"), before.epoch, "`trees` before the failure")
    same("roots_before", _names(ans.get("roots_before")), sorted(t.root for t in before.trees),
         "`trees` lists one root per tree")
    link = ans.get("failed_link")
    if not (isinstance(link, list) and len(link) == 2 and g.has_edge(*link)):
        out.append(result("failed_link", False, f"failed_link must be [A, B], a link of the lab's topology; got {link!r}"))
        return out
    on_tree = any(t.uses(*link) for t in before.trees)
    out.append(result("failed_link is on an active tree", on_tree,
                      "" if on_tree else f"{link[0]}-{link[1]} is on no active tree: cutting it changes nothing; "
                                         f"pick an edge printed by `trees`"))
    g.edges[link[0], link[1]]["up"] = False
    after = compute(spec.tree, g, epoch=before.epoch + 1)
    same("epoch_after", ans.get("epoch_after"), after.epoch, "one reroute = one new epoch")
    same("roots_after", _names(ans.get("roots_after")), sorted(t.root for t in after.trees),
         "`trees` after the reroute")
    ms = ans.get("reroute_ms")
    ok = isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 < ms < 60_000
    out.append(result("reroute_ms measured", ok, "" if ok else f"reroute_ms: {ms!r} is not a time in ms; take it "
                                                               "from `events`: the time of `rerouted around link "
                                                               "...` minus the time of `link ... went down`, in "
                                                               "milliseconds"))
    why = str(ans.get("why_epoch") or "").strip()
    words = why.lower().split()
    missing = [what for what, found in
               (("at least a sentence (8 words)", len(words) >= 8),
                ("the word epoch", any("epoch" in w for w in words)),
                ("what happens to packets of the old (stale, previous) epoch",
                 any(w.strip(".,;:()") in ("old", "stale", "previous", "earlier", "former") for w in words)))
               if not found]
    out.append(result("why_epoch explained", not missing,
                      "" if not missing else "why_epoch: explain why the epoch changes and what the switches "
                                             "and agents do with packets of the old epoch; missing: "
                                             + "; ".join(missing)))
    return out


def _names(value):
    return sorted(str(v) for v in value) if isinstance(value, list) else value
