"""The controller's events in words, one line each, for the lab (its `events` command and the
`[event]` lines it prints as they happen).

Why: the event log (controller/events.py) keeps each event as a kind and raw fields
(`standby_ready tree=rat failures=39 ms=2342.3`), which is what a run directory's
events.log and `events -v` show; a student in the lab reads a sentence instead
("standby trees ready for 39 single failures (rat), computed in 2342.3 ms"). A kind without
words here is shown raw, so a new event is never hidden.
"""

from __future__ import annotations


def _where(i: dict) -> str:
    """What an event is about: a link, a switch, or both absent."""
    if "switch" in i:
        return f"switch {i['switch']}"
    return f"link {i['link']}" if "link" in i else ""


def _tree(i: dict) -> str:
    """The tree algorithm an event names: `tree=`, or `algorithm=` in the events of runs from
    before the field was renamed (`algorithm` now means the scheme only), which `agglab show`
    and `replay` still read from old run directories."""
    return i.get("tree", i.get("algorithm", ""))


def _job(i: dict) -> str:
    return f" (job {i['job']})" if "job" in i else ""


WORDS = {
    "link_down": lambda i: f"link {i['link']} went down (seen on netlink at {i.get('intf', '?')})",
    "link_up": lambda i: f"link {i['link']} came back up (seen on netlink at {i.get('intf', '?')})",
    "switch_down": lambda i: f"switch {i['switch']} is down: its {i.get('links', '?')} links count as failed",
    "switch_up": lambda i: f"switch {i['switch']} is up again ({i.get('links', '?')} links)",
    "switch_exited": lambda i: f"switch {i['switch']}'s process exited (code {i.get('code')})",
    "trees_installed": lambda i: (f"trees installed: epoch {i['epoch']}, {i.get('trees')} {_tree(i)} "
                                  f"tree(s)" + (f" ({i['why']})" if i.get("why") else "")
                                  + (f", computed in {i['compute_ms']} ms" if "compute_ms" in i else "")
                                  + (f", installed in {i['install_ms']} ms" if "install_ms" in i else "")),
    "routes_installed": lambda i: (f"routes installed: {i.get('entries')} table entries over {i.get('links')} links"
                                   f" in {i.get('install_ms')} ms"),
    "rerouted": lambda i: (f"rerouted around {_where(i)}{_job(i)}: epoch {i.get('epoch')}"
                           + (f", {i['entries']} entries changed" if "entries" in i else "")
                           + (f", recomputed in {i['recompute_ms']} ms" if "recompute_ms" in i else "")
                           + (f", installed in {i['install_ms']} ms" if "install_ms" in i else "")),
    "no_reinstall": lambda i: f"{_where(i) or 'the change'}{_job(i)}: trees kept ({i.get('why', 'no reason given')})",
    "partitioned": lambda i: (f"workers PARTITIONED{_job(i)}"
                              + (f" by {_where(i)}" if _where(i) else "")
                              + (f": {i['reason']}" if i.get("reason") else "")),
    "standby_ready": lambda i: (f"standby trees ready for {i.get('failures')} single failures "
                                f"({_tree(i)}), computed in {i.get('ms')} ms"),
    "atp_installed": lambda i: f"ATP pools installed{_job(i)} on {i.get('switches')} switches",
    "bml_installed": lambda i: (f"BML schedule installed: {i.get('variant')}, {i.get('levels')} levels, "
                                f"{i.get('entries')} entries in {i.get('install_ms')} ms"),
    "bml_replanned": lambda i: f"BML schedule re-planned around {_where(i)}",
    "sparse_carry_conflict": lambda i: f"{i.get('columns')} sparse columns could not be carried across the reroute",
    "link_failure_error": lambda i: f"ERROR handling link {i.get('link')}{_job(i)}: {i.get('error')}",
    "switch_failure_error": lambda i: f"ERROR handling switch {i.get('switch')}{_job(i)}: {i.get('error')}",
    "remove_groups_error": lambda i: f"ERROR removing multicast groups: {i.get('error')}",
    "reroute_tidy_error": lambda i: f"ERROR tidying up after a reroute: {i.get('error')}",
}


def raw(kind: str, info: dict) -> str:
    return f"{kind:<18} " + " ".join(f"{k}={v}" for k, v in info.items())


def in_words(kind: str, info: dict) -> str:
    """One event as a sentence; raw if its kind has no words (or they miss a field)."""
    words = WORDS.get(kind)
    try:
        return words(info) if words else raw(kind, info)
    except KeyError:
        return raw(kind, info)


def event_line(t0: float, t: float, kind: str, info: dict, verbose: bool = False) -> str:
    """`  12.345s  <words>`; verbose adds the raw fields on a second line."""
    line = f"{t - t0:9.3f}s  {in_words(kind, info)}"
    return line + (f"\n{'':11}  [{raw(kind, info).rstrip()}]" if verbose else "")
