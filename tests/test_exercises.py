"""Teaching exercises (agglab/exercise.py): the generator round-trips and every exercise is gradable.

Why these and not more: an exercise is only worth shipping if its solution (the project's own,
tested code) passes the checker and its untouched skeleton fails it with a message naming what
is missing; and the skeletons are only trustworthy if putting the solution regions back gives
the original file byte for byte. The checks themselves run in a subprocess with the student's
modules imported in place of the project's, as `agglab exercise check` does.
"""

from __future__ import annotations

import re

import pytest

from agglab import exercise
from agglab.ground import wire
from agglab.ground.paths import REPO

EXERCISES = exercise.exercises()
MARKED = sorted({rel for ex in EXERCISES for rel in ex.files})


def marked_files_in_repo() -> set[str]:
    """Every project file with an EXERCISE marker (so a new marker cannot be forgotten)."""
    found = set()
    for pattern in ("**/*.py", "p4src/**/*.p4"):
        for path in REPO.glob(pattern):
            rel = str(path.relative_to(REPO))
            if rel.startswith((".venv", "tests/", "build/")) or "agglab/exercise" in rel:
                continue
            if re.search(r"^\s*(#|//) EXERCISE [\w-]+ BEGIN", path.read_text(), re.M):
                found.add(rel)
    return found


def test_every_marked_file_belongs_to_an_exercise_and_every_region_exists():
    assert marked_files_in_repo() == set(MARKED)
    owners: dict[str, int] = {}
    for ex in EXERCISES:
        names = set()
        for rel in ex.files:
            names |= set(exercise.regions(exercise.repo_text(rel), rel))
        assert set(ex.regions) <= names, (ex.number, set(ex.regions) - names)
        for name in ex.regions:
            assert owners.setdefault(name, ex.number) == ex.number, f"region {name} in two exercises"
    every = {n for rel in MARKED for n in exercise.regions(exercise.repo_text(rel), rel)}
    assert every == set(owners), every ^ set(owners)


@pytest.mark.parametrize("ex", [e for e in EXERCISES if e.files], ids=lambda e: e.slug)
def test_generator_round_trips(ex):
    for rel in ex.files:
        original = exercise.repo_text(rel)
        skel = exercise.skeleton(original, ex, rel)
        assert skel != original
        for name in ex.regions:
            region = exercise.regions(original, rel).get(name)
            if region is not None:
                assert region.body.strip() not in skel, f"{rel}: the solution of {name} leaks into the skeleton"
        assert f"{exercise.TODO} {ex.number}" in skel
        assert exercise.splice(skel, original, ex.regions, rel) == original


def test_splice_refuses_a_file_whose_markers_were_deleted():
    ex = exercise.get(1)
    rel = "softswitch/aggregate.py"
    text = exercise.repo_text(rel)
    broken = text.replace("EXERCISE aggregate-add BEGIN", "EXERCISE renamed BEGIN")
    with pytest.raises(exercise.ExerciseError, match="aggregate-add"):
        exercise.splice(text, broken, ex.regions, rel)


def test_marker_errors_name_the_line():
    with pytest.raises(exercise.ExerciseError, match=r"x\.py:1: EXERCISE r BEGIN without END"):
        exercise.split("# EXERCISE r BEGIN hint: h\nbody\n", "x.py")
    with pytest.raises(exercise.ExerciseError, match=r"x\.py:2: EXERCISE END without BEGIN"):
        exercise.split("a\n# EXERCISE END\n", "x.py")


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.slug)
def test_solution_passes_the_checker(ex, tmp_path):
    exercise.start(ex, tmp_path / "w", solution=True)
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    assert result["ok"], exercise.show(result)
    assert result["total"] >= 4


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.slug)
def test_untouched_skeleton_fails_naming_the_missing_part(ex, tmp_path):
    exercise.start(ex, tmp_path / "w")
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    assert not result["ok"]
    failed = " ".join(c["name"] + " " + c["detail"] for c in result["checks"] if not c["ok"])
    for name in ex.regions:
        assert f"region {name}" in failed, (name, exercise.show(result))
    if ex.number == 5:
        assert "epoch_before is not answered yet" in failed


def test_a_wrong_addition_reports_the_first_differing_packet(tmp_path):
    """A student who overwrites instead of adding sees which packet differs, and how."""
    ex = exercise.get(1)
    exercise.start(ex, tmp_path / "w", solution=True)
    path = tmp_path / "w/softswitch/aggregate.py"
    text = path.read_text()
    assert "np.add(lanes, pkt, out=lanes)" in text
    path.write_text(text.replace("np.add(lanes, pkt, out=lanes)", "lanes[:] = pkt"))
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    bad = {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}
    assert "registers (expected, got)" in bad["conformance accumulation (software switch)"], exercise.show(result)
    packet = bad["conformance completion_multicast (software switch)"]
    # the first line names the first differing field: lane 0 is 1 + 10 + 100 in the vector,
    # the last contribution alone when it overwrites
    assert "packet 3 on port 3: packet out on port 1: values[0] expected 111, got 100" in packet.splitlines()[0]
    assert f"agg_values[{5 * wire.K}] expected 11, got 10" in bad["conformance accumulation (software switch)"]
    assert "conformance first_contribution (software switch)" not in bad
    # the frames themselves: in the grade object, and printed by --verbose only
    frames = next(c["packets"] for c in result["checks"] if c["name"].startswith("conformance completion_multicast"))
    assert "expected:" in frames and "got:" in frames and "values[:5]=[100, 200, -300, 0, 5]" in frames
    sent = "values[:5]=[100, 200, -300, 0, 5]"      # the completing packet, as sent
    assert sent in exercise.show(result, verbose=True) and sent not in exercise.show(result)
    assert "--verbose" in exercise.show(result)


MISTAKES = {        # a plausible mistake in a region -> the check that must catch it (and what it says)
    "version ignores v0": (2, "hosts/agent.py", "ver = (self.v0[s] + r) & 1", "ver = r & 1",
                           "two allreduces in a row (software switch)"),
    "timer resends but is never re-armed": (2, "hosts/slots.py",
                                            "            deadline[s] = self.last_sent[s] + backoff(self.rtt.rto, "
                                            "self.tries[s])\n", "",
                                            "retransmission timer re-arms (software switch)"),
    "completion forgets the sparse re-arm": (1, "softswitch/aggregate.py",
                                             "            if self.on_complete is not None:\n"
                                             "                self.on_complete(r, o, flags)\n", "",
                                             "conformance sparse_rearm (software switch)"),
    "max(next) instead of min(next)": (3, "softswitch/sparse.py", "n = min(nexts) if end > cb else NONE",
                                       "n = max(nexts) if end > cb else NONE",
                                       "conformance sparse_first_round (software switch)"),
    "carry looks at version 0 only": (6, "controller/reroute/holders.py", "    for ver in (0, 1):\n        r = "
                                      "slot_index(ver, slot_base, slot)\n        if reg(root.switch, \"agg_count\")",
                                      "    for ver in (0,):\n        r = slot_index(ver, slot_base, slot)\n"
                                      "        if reg(root.switch, \"agg_count\")",
                                      "carry of a frozen allreduce (software twin, fat-tree k=4)"),
    "carry preloads the new root only": (6, "controller/reroute/failover.py",
                                         "            else:\n                cells.put_cells(sw, r, {\"agg_count\": "
                                         "fan_in, \"agg_bitmap\": (1 << fan_in) - 1, \"agg_block\": done.block})\n",
                                         "", "carry of a frozen allreduce (software twin, fat-tree k=4)"),
    "carried bitmap off by one": (6, "controller/reroute/failover.py",
                                  '{"agg_count": fan_in, "agg_bitmap": (1 << fan_in) - 1, "agg_block": done.block,',
                                  '{"agg_count": fan_in, "agg_bitmap": 1 << fan_in, "agg_block": done.block,',
                                  "carry of a frozen allreduce (software twin, fat-tree k=4)"),
    "ATP hash leaves the job out": (7, "softswitch/schemes/atp.py",
                                    'return zlib.crc32(bytes((job,)) + seq.to_bytes(4, "big")) % POOL',
                                    'return zlib.crc32(seq.to_bytes(4, "big")) % POOL',
                                    "aggregator_of(job, seq) as atp.p4 hashes"),
    "ATP collision within a job not detected": (7, "softswitch/schemes/atp.py",
                                                "self.owner_job.item(i) == job and self.owner_seq.item(i) == seq",
                                                "self.owner_job.item(i) == job",
                                                "conformance atp_same_job_collision (software switch)"),
    "ATP fallback drops the packet": (7, "softswitch/schemes/atp.py",
                                      "            return self.forward.ipv4(frame)\n            # EXERCISE END",
                                      "            return None\n            # EXERCISE END",
                                      "conformance atp_collision_fallback (software switch)"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_plausible_mistake_is_caught_by_its_check(mistake, tmp_path):
    number, rel, old, new, check = MISTAKES[mistake]
    ex = exercise.get(number)
    exercise.start(ex, tmp_path / "w", solution=True)
    path = tmp_path / "w" / rel
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    bad = {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}
    assert check in bad, exercise.show(result)
    assert "what this" in bad[check]              # and it says what the check is about
    assert MISTAKE_SAYS.get(mistake, "") in bad[check].splitlines()[0], exercise.show(result)
    assert "?" not in bad[check].splitlines()[0]  # the first difference, not a guess


MISTAKE_SAYS = {    # what the first line of the failure must name
    "timer resends but is never re-armed": "the timer resends but is not re-armed",
    "carry looks at version 0 only": "slot 12 of job 0 lost 6 contributions: its version 1, complete at the old "
                                     "root c1, is still needed below a5",
    "carry preloads the new root only": "slot 7 of job 0 lost 6 contributions: its version 0, complete at the old "
                                        "root c1, is still needed below a1",
    "carried bitmap off by one": "c2's agg_bitmap[7] (slot 7, version 0) is 0b10000, expected 0b1111: a resend "
                                 "from a child whose bit is clear is added to the carried sum a second time",
    "ATP hash leaves the job out": "aggregator_of(job 1, seq 5) is 147, expected 34",
    "ATP collision within a job not detected": "packet 2 on port 2: packet out on port 3: agg.next_block expected "
                                               "4, got 6",
    "ATP fallback drops the packet": "packet 2 on port 2: expected 1 packet(s) out (ports [3]), got 0",
}


WRONG_TREES = {      # a plausible mistake in region rack-aware -> the scenarios it must fail
    "no rack-aware filter": (("pool = good if max(uplinks.values()) <= 1 else other", "pool = good"),
                             ("l1-s1 down", "l1-s1 and l3-s2 down", "fat-tree")),
    "ToR counted only as an edge's first name": (("for t, o in ((a, b), (b, a)):", "for t, o in ((a, b),):"),
                                                 ("fat-tree",)),
}


@pytest.mark.parametrize("mistake", sorted(WRONG_TREES))
def test_a_tree_that_relays_a_rack_is_caught(mistake, tmp_path):
    """A ToR that relays another rack after a failure is named, in exactly the failing scenarios."""
    (old, new), failing = WRONG_TREES[mistake]
    ex = exercise.get(4)
    exercise.start(ex, tmp_path / "w", solution=True)
    path = tmp_path / "w/controller/trees/rat.py"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    bad = [c for c in result["checks"] if not c["ok"]]
    assert bad and all("relays another rack" in c["detail"] for c in bad), exercise.show(result)
    assert len(bad) == len(failing) and all(any(f in c["name"] for c in bad) for f in failing), exercise.show(result)


def test_wrong_answers_are_caught_without_giving_the_answer_away(tmp_path):
    ex = exercise.get(5)
    exercise.start(ex, tmp_path / "w", solution=True)
    path = tmp_path / "w/answers.yaml"
    path.write_text(path.read_text().replace("roots_after: [a3, a5, a7, c2, c3, c4]", "roots_after: [c2, c3, c4]"))
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    bad = {c["name"]: c["detail"] for c in result["checks"] if not c["ok"]}
    assert list(bad) == ["roots_after"], exercise.show(result)
    assert "a3" not in bad["roots_after"]


def test_a_wrong_sum_names_the_first_differing_element_and_no_guess():
    """Two arrays equal in element 0: the message names element 2, both values, and guesses
    nothing (it once printed "got 3, expected 3 (a stale result of the previous call?)")."""
    import numpy as np

    from agglab.exercise_kit import first_difference

    line = first_difference(np.array([3, 3, 5, 7], np.int32), np.array([3, 3, 4, 7], np.int32))
    assert line == "element 2 is 5, expected 4"


def test_cli_exit_codes(tmp_path, capsys):
    from agglab.cli import main

    assert main(["exercise", "list"]) == 0
    assert "rack-aware" in capsys.readouterr().out
    assert main(["exercise", "start", "9", "--dir", str(tmp_path / "x")]) == 2
    assert "no exercise 9" in capsys.readouterr().err
    assert main(["exercise", "check", "1", "--dir", str(tmp_path / "missing")]) == 2
    assert main(["exercise", "start", "3", "--dir", str(tmp_path / "w")]) == 0
    assert main(["exercise", "start", "3", "--dir", str(tmp_path / "w")]) == 2   # would overwrite work
    assert main(["exercise", "check", "3", "--dir", str(tmp_path / "w"), "--bmv2", "no", "--json"]) == 1
    grade = __import__("json").loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert grade["exercise"] == 3 and grade["ok"] is False and grade["passed"] < grade["total"]


P4_EXERCISES = [e.number for e in EXERCISES if e.p4]


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(1200)
@pytest.mark.parametrize("number", P4_EXERCISES)
def test_p4_solution_passes_on_bmv2(number, tmp_path):
    """The P4 regions, compiled from an overlay p4src, pass the exercise's vectors on simple_switch
    and an allreduce in Mininet through BMv2 running them. Needs the machine-wide network lock
    (AGGLAB_NET_LOCK) like every BMv2 test."""
    ex = exercise.get(number)
    exercise.start(ex, tmp_path / "w", solution=True)
    result = exercise.check(ex, tmp_path / "w", bmv2="yes", timeout=900)
    assert result["ok"], exercise.show(result)
    assert any("(BMv2)" in c["name"] for c in result["checks"])
    assert any("(BMv2, Mininet)" in c["name"] and "exact" in c["detail"] for c in result["checks"])
    assert not result["skipped"], exercise.show(result)          # the P4 regions are graded, not skipped


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.net_timeout(1200)
@pytest.mark.parametrize("number", P4_EXERCISES)
def test_p4_skeleton_fails_on_bmv2(number, tmp_path):
    """The Python solution with the untouched P4 skeleton: the software-switch checks pass, and
    BMv2 fails naming the P4 regions (they are graded, not skipped, where BMv2 runs)."""
    ex = exercise.get(number)
    exercise.start(ex, tmp_path / "w", solution=True)
    for rel in ex.files:
        if rel.endswith(".p4"):
            (tmp_path / "w" / rel).write_text(exercise.skeleton(exercise.repo_text(rel), ex, rel))
    result = exercise.check(ex, tmp_path / "w", bmv2="yes", timeout=900)
    bad = [c for c in result["checks"] if not c["ok"]]
    assert bad and all(".p4" in c["name"] or "BMv2" in c["name"] or "(p4c)" in c["name"] for c in bad), \
        exercise.show(result)
    p4_regions = {n for rel in ex.files if rel.endswith(".p4") for n in exercise.regions(exercise.repo_text(rel), rel)
                  if n in ex.regions}
    assert {n for n in p4_regions if any(f"region {n} in" in c["name"] for c in bad)} == p4_regions
    assert any("(BMv2)" in c["name"] or "(p4c)" in c["name"] for c in bad), exercise.show(result)


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
def test_answers_read_off_a_real_lab_pass_the_checker(tmp_path, capsys, monkeypatch):
    """Exercise 5's checker reruns the controller offline; the answers a student reads off a real
    `agglab lab` (the lab's defaults: fat-tree k=4, 8 workers, RAT) must pass it. Needs the
    machine-wide network lock (AGGLAB_NET_LOCK) like every Mininet test.

    The script's second `trees` must follow the reroute: a command this test adds to the lab
    (`settled`) waits for the controller's answer to the failure in its event log, where a
    student would wait by eye (a fixed sleep came too early on a loaded machine)."""
    from agglab.lab import LabCLI, run_lab
    from agglab.ground.runspec import RunSpec
    from agglab.testkit.waits import wait_until
    from tests.leftovers import assert_clean

    def settled(cli, line):
        answers = ("rerouted", "no_reinstall", "partitioned", "link_failure_error")
        wait_until(lambda: any(cli.session.events.of_kind(k) for k in answers), timeout=120,
                   what="the controller's answer to the link failure")

    monkeypatch.setattr(LabCLI, "do_settled", settled, raising=False)
    script = tmp_path / "lab.txt"
    script.write_text("trees\nfail a1 c1\nsettled\ntrees\nevents\n")
    run_lab(RunSpec(topology="fattree", workers=8, tree="rat", elements=30000), script=str(script))
    out = capsys.readouterr().out
    epochs = [int(e) for e in re.findall(r"^tree rat, algorithm switchml, epoch (\d+),", out, re.M)]
    listings = re.split(r"^tree rat, algorithm switchml, epoch \d+,.*$", out, flags=re.M)[1:]
    roots = [re.findall(r"^  tree \d+: root (\w+),", block, re.M) for block in listings]
    down = re.search(r"^\s+([\d.]+)s\s+link (c1-a1|a1-c1) went down\b", out, re.M)
    rerouted = re.search(r"^\s+([\d.]+)s\s+rerouted around link (c1-a1|a1-c1)(?: \(job \d+\))?: epoch (\d+)", out,
                         re.M)
    assert len(epochs) == 2 and down and rerouted, out
    assert int(rerouted.group(3)) == epochs[1], out
    ex = exercise.get(5)
    exercise.start(ex, tmp_path / "w")
    answers = {"epoch_before": epochs[0], "roots_before": roots[0], "failed_link": ["a1", "c1"],
               "epoch_after": epochs[1], "roots_after": roots[1],
               "reroute_ms": round((float(rerouted.group(1)) - float(down.group(1))) * 1000, 1),
               "why_epoch": "The controller installs the recomputed trees under a new epoch, and the "
                            "switches ignore packets of the old epoch, so agents resend them."}
    (tmp_path / "w/answers.yaml").write_text(__import__("yaml").safe_dump(answers))
    result = exercise.check(ex, tmp_path / "w", bmv2="no", timeout=240)
    assert result["ok"], exercise.show(result) + "\n" + out
    assert_clean()


def test_a_check_with_ungraded_regions_says_so():
    """Skipped (ungraded) P4 regions must never be summed up as "all checks pass"."""
    ex = exercise.get(1)
    checks = [{"name": "region aggregate-add in softswitch/aggregate.py written", "ok": True, "detail": ""},
              {"name": "region aggregate-add in p4src/include/aggregate.p4 written", "ok": True, "skipped": True,
               "detail": "P4 not graded here: BMv2 simple_switch/p4c not found (still TODO)"}]
    result = exercise.grade(ex, checks)
    assert result["ok"] and result["complete"] is False
    assert result["ungraded"] == ["region aggregate-add in p4src/include/aggregate.p4 written"]
    last = exercise.show(result).splitlines()[-1]
    assert "all checks pass" not in last and "1 NOT graded here (P4 not graded here: BMv2" in last, last
    full = exercise.grade(ex, checks[:1])
    assert full["complete"] and exercise.show(full).splitlines()[-1].endswith("1 of 1 graded checks pass: all checks pass")
