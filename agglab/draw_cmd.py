"""`agglab draw TOPOLOGY [RUN OPTIONS] [--fail A-B ...] -o FILE.svg|.png|.dot`: the topology
laid out by tier with the job's aggregation trees, each in its colour with its share of the
gradient, roots marked, link rates on the links and failed links dashed.

Why a command of its own (no network, no root): the trees are a pure function of the
topology, the algorithm and the failed links, computed by the controller's code
(controller/drawing.py `after_failures`), so a student can look at what a run would install
before running it, and at the rerouted trees after `--fail`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agglab.run_options import add_run_options, bad_input, spec_from_args
from agglab.controller import drawing, topologies
from agglab.controller.drawing import after_failures
from agglab.controller.topology import workers as worker_hosts
from agglab.controller.trees.base import TreeError


def add_parser(sub) -> None:
    d = sub.add_parser("draw", help="draw the topology and the job's aggregation trees (SVG, PNG or DOT); "
                       "no network is built")
    d.add_argument("topology_name", metavar="TOPOLOGY",
                   help=f"{topologies.help_text()} (as --topology)")
    add_run_options(d, workers=8)
    d.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="where to write the drawing: .svg, .png (Graphviz) or .dot (Graphviz source)")
    d.add_argument("--each", action="store_true",
                   help="with --fail: also write FILE-stepN.EXT, the trees before failure N+1 (step0: the first trees)")
    d.set_defaults(func=_draw)


def failed_links(fails: list[str] | None, g, tree: str, workers: list[str], seed: int) -> list[tuple[str, str]]:
    """The links `--fail` names, in order: A-B (a fraction @F is accepted and ignored: a
    drawing has no progress), or tree[@F] for the link `--fail tree@F` would take down on
    the trees in force at that point (job_protocol.pick_link, as the run picks it)."""
    from agglab.controller.job_protocol import pick_link  # lazy: loads numpy, only failed_links() needs it

    out: list[tuple[str, str]] = []
    for text in fails or []:
        name = text.split("@", 1)[0].strip()
        if name == "tree":
            ts = after_failures(g, tree, workers, out)[-1].treeset
            marked = g.copy()
            for u, v in out:
                marked.edges[u, v]["up"] = False
            out.append(pick_link(marked, ts, workers, seed))
            continue
        a, sep, b = name.partition("-")
        if not sep or not g.has_edge(a, b):
            raise ValueError(f"--fail {text!r}: there is no link {name!r} in this topology (write A-B, e.g. "
                             f"{'-'.join(next(iter(g.edges)))})")
        out.append((a, b))
    return out


def _draw(args) -> int:
    try:
        args.topology = args.topology_name
        fails, args.fail = args.fail, None        # a drawing's failures need no @FRACTION
        spec = spec_from_args(args)
        spec.validate()
        g = topologies.for_run(spec)
        workers = worker_hosts(g)
        out = Path(args.output)
        if out.suffix.lstrip(".").lower() not in drawing.FORMATS:
            raise ValueError(f"-o {args.output}: the file must end in .svg, .png or .dot")
        links = failed_links(fails, g, spec.tree, workers, spec.seed)
        epochs = drawing.after_failures(g, spec.tree, workers, links)
    except (ValueError, TreeError) as exc:
        return bad_input("draw", exc)
    last = epochs[-1]
    title = f"{g.graph.get('name', spec.topology)}: {spec.tree} trees, {len(workers)} workers" + (
        f", after {' '.join(f'{a}-{b}' for a, b in links)} failed" if links else "")
    try:                                          # an unwritable -o is bad input too: one line
        drawing.write(drawing.to_dot(g, last.treeset, last.down, title=title, workers=workers), out)
        written = [out]
        if args.each and links:
            for i, ep in enumerate(epochs[:-1]):
                path = out.with_name(f"{out.stem}-step{i}{out.suffix}")
                what = "before any failure" if ep.failed is None else f"after {ep.failed[0]}-{ep.failed[1]} failed"
                drawing.write(drawing.to_dot(g, ep.treeset, ep.down, title=f"{title.split(',')[0]}, {what}",
                                             workers=workers), path)
                written.append(path)
    except OSError as exc:
        return bad_input("draw", ValueError(f"-o {args.output}: {exc.strerror or exc}"))
    print(f"wrote {', '.join(map(str, written))}: {len(last.treeset.trees)} tree(s) at epoch {last.treeset.epoch}"
          + (f", links down: {' '.join(f'{a}-{b}' for a, b in sorted(last.down))}" if last.down else ""),
          file=sys.stderr)
    return 0
