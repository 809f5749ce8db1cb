"""A run's wire time: what its network allows, from its own topology, link rates and bytes.

Why: a measured time (or a ratio of two) is only informative beside what *this* network can
reach; experiments/bounds.py puts each claim's bound beside the paper's figure, and every
allreduce result carries its run's wire time (a run far slower than it was decided by
something other than its links).

A run's **wire time** is every link direction's bytes on the wire divided by its rate, the
busiest one deciding (a fluid model: links work in parallel, no start-up, no queueing), less
what each link's full htb bucket sends at once (`link_seconds`). Bytes follow what the run
does, recomputed here by the code the run uses, not typed in:

* in-network (switchml) on the controller's trees (`agglab.controller.trees.compute`, with their
  weights): each tree edge carries its share of the aggregation frames up and the results
  down; every call adds its lead frames (float32: one per slot; int32: one);
* block-sparse (omnireduce): the same, with each worker's own non-zero K-blocks going up
  and the union of its subtree's coming down (`agglab.hosts.sparse_workload`, the run's seed),
  every slot's lead frame both ways, and the header-only ACKs going up (`sparse_acks`);
* ring: rank r sends 2(n-1)/n of the gradient to rank r+1 over the installed IP routes
  (`agglab.controller.forward.next_hops`), in TCP segments; ps: every ordered pair 2/n of it;
* BML: the schedule's stages one after the other (`agglab.controller.trees.bml`), each as long
  as its busiest link: host-based transfers are TCP, one switch hop; in-network steps are
  aggregation frames to and from the level switch; after a failed NIC or level switch, the
  relay re-plan's group steps (`bml_relay_seconds`), each the whole gradient;
* ATP (`atp_seconds`): its two levels, as controller/schemes/atp.py installs them: each
  worker's frames to its ToR, one aggregated stream from each worker ToR over the routes to
  the PS's ToR, one from there to the PS (rank 0's host), and the PS's unicast of every
  result to every worker (`--atp-multicast`: one copy to its ToR, which sends each worker
  its own along the ToR's route); a `fallback` share of each worker's frames (what found its
  aggregator taken, measured in a run as the PS's fallback packets) crosses to the PS
  alone. With fallback 0 (no collision: the best the pool can do) it is a lower bound;
* with `jobs` J (tenants on their own hosts, controller/topology.tenant_hosts), every job's
  bytes at once on the shared links: the in-network schemes' trees and ATP's streams per
  job; a scheme without a WIRE_MODEL has no bound (BoundError);
* scripted link failures (`A-B@F`): the bytes after fraction F run on the graph without
  that link, with the trees and routes recomputed as the controller does; a dense in-network
  job whose trees used the link also resends its whole window on the new trees
  (`resend_seconds`: the agents rebuild every outstanding packet with the new epoch).

Times are in the units of the graph's rates (Mb/s: emulated seconds for a run's graph).
"""

from __future__ import annotations

from typing import Any, Callable

import networkx as nx

from agglab.controller import topologies, trees
from agglab.controller.forward import next_hops, plain_live_graph
from agglab.controller.schemes import WIRE_MODELS
from agglab.controller.topology import mark_link, tenant_hosts, workers as ranked_workers
from agglab.controller.trees.bml_relay import relay_plan
from agglab.ground import links, wire
from agglab.ground.runspec import BCUBE_TREE, RunSpec
from agglab.ground.schemes import SCHEMES
from agglab.hosts.sparse_workload import nonzero_block_ids

TCP_SEGMENT, TCP_FRAME = 1448, 1514          # a full TCP segment and its Ethernet frame

Loads = dict  # (u, v) directed link -> bytes on the wire


class BoundError(ValueError):
    """No analytic bound for this point (a failure picked at run time, a link without rate)."""


# -- links and bytes ---------------------------------------------------------------
def link_seconds(g: nx.Graph, loads: Loads) -> float:
    """The busiest link direction's time: bytes * 8 / its rate (graph `bw`, Mb/s), less the
    bytes its full htb bucket lets through at once (ground/links.py `burst_bytes`).

    Why the bucket: an idle link starts with it full, and at the rates a hundred workers run
    at it is no longer small: 6,000 bytes, the bucket's floor before it was capped at 0.1 s
    of a slow link, were a second of a 0.048 Mb/s link. Measured there (one tree through
    that link, 40,506 bytes): 5.73 s, against 6.75 s without the bucket and 5.75 s with it.
    A phase whose links were idle before (a BML stage) starts with full
    buckets too; the fractions of a failed run weigh theirs, so one bucket is counted.
    A graph whose `graph["buckets"]` is False has ideal links (no bucket): the pure bytes."""
    worst = 0.0
    buckets = g.graph.get("buckets", True)
    for (u, v), nbytes in loads.items():
        bw = g.edges[u, v].get("bw")
        if not bw:
            raise BoundError(f"link {u}-{v} has no rate: a wire time needs every used link's bw")
        burst = links.burst_bytes(float(bw)) if buckets else 0
        worst = max(worst, max(0.0, nbytes - burst) * 8 / (float(bw) * 1e6))
    return worst


def _add(loads: Loads, u: str, v: str, nbytes: float) -> None:
    loads[u, v] = loads.get((u, v), 0.0) + nbytes


def route(g: nx.Graph, a: str, b: str, hops: dict | None = None) -> list[str]:
    """The nodes host a's packets to host b cross, following each switch's installed next
    hop (controller/forward.py), as the switches forward them (`hops` caches them per switch,
    and under the key None the live links they are computed on: one graph state per cache)."""
    hops = {} if hops is None else hops
    if None not in hops:
        hops[None] = plain_live_graph(g)
    live = hops[None]
    first = next(n for n in live.neighbors(a) if g.nodes[n]["kind"] == "switch")
    path, node = [a, first], first
    while node != b:
        if node not in hops:
            hops[node] = next_hops(g, node, live)
        node = hops[node][b]
        path.append(node)
    return path


def flow_loads(g: nx.Graph, flows: list[tuple[str, str, float]]) -> Loads:
    """Directed link loads of (source host, destination host, wire bytes) flows."""
    loads: Loads = {}
    hops: dict = {}
    for a, b, nbytes in flows:
        p = route(g, a, b, hops)
        for u, v in zip(p, p[1:]):
            _add(loads, u, v, nbytes)
    return loads


def tree_loads(treeset, up: Callable[[Any, str], float], down: Callable[[Any, str], float]) -> Loads:
    """Directed loads of aggregation trees: on each tree edge (node -> parent) `up(tree,
    node)` bytes climb and `down(tree, node)` bytes come back."""
    loads: Loads = {}
    for t in treeset.trees:
        for node, parent in t.parent.items():
            if parent is not None:
                _add(loads, node, parent, up(t, node))
                _add(loads, parent, node, down(t, node))
    return loads


def below(tree, node: str, workers: set[str]) -> list[str]:
    """The workers in `node`'s subtree of `tree` (node included)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n in workers:
            out.append(n)
        stack.extend(tree.children(n))
    return out


def tcp_bytes(payload: float) -> float:
    return payload * TCP_FRAME / TCP_SEGMENT


# -- per algorithm: the wire time of one allreduce on one graph ----------------------
def frames(spec: RunSpec, elements: int | None = None) -> int:
    """Aggregation frames a dense call sends per worker (of `elements`, default the spec's):
    its K-blocks and its lead frames (ground/wire.py dense_frames)."""
    return wire.dense_frames(spec.elements if elements is None else elements, spec.dtype, spec.default_window())


def innet_seconds(spec: RunSpec, g: nx.Graph, nframes: int | None = None) -> float:
    """Each job's trees (tenants: each its own, over its own hosts) carry its frames (a
    call's, or `nframes` per worker) up and its results down, all jobs at once."""
    total = (frames(spec) if nframes is None else nframes) * wire.FRAME_BYTES
    loads: Loads = {}
    for hosts in tenant_hosts(g, spec.jobs, spec.placement):
        ts = trees.compute(spec.tree, g, hosts)
        for edge, nbytes in tree_loads(ts, lambda t, n: t.weight * total, lambda t, n: t.weight * total).items():
            _add(loads, *edge, nbytes)
    return link_seconds(g, loads)


def _edge(g: nx.Graph, host: str) -> str:
    return next(n for n in g.neighbors(host) if g.nodes[n]["kind"] == "switch")


def atp_loads(g: nx.Graph, hosts: list[str], nbytes: float, fallback: float = 0.0,
              multicast: bool = False) -> Loads:
    """One ATP job's directed loads (rank 0's host the PS): `nbytes` per worker each way.
    Aggregated (1 - fallback): each worker to its ToR; each worker ToR's one stream over the
    routes to the PS's ToR (the switches between aggregate nothing: ATP's two levels); the
    PS's ToR's one stream to the PS. Fallen back (fallback): each worker's own frames to the
    PS. Down: the PS unicasts every result to every worker (hosts/schemes/atp.py), or with
    `multicast` sends one copy to its ToR, which sends each worker its own from there."""
    loads: Loads = {}
    hops: dict = {}
    ps, others = hosts[0], hosts[1:]
    if not others:
        return loads
    ps_tor = _edge(g, ps)
    agg = (1 - fallback) * nbytes
    racks = sorted({_edge(g, w) for w in others})
    for w in others:
        _add(loads, w, _edge(g, w), agg)
        p = route(g, w, ps, hops)
        for u, v in zip(p, p[1:]):
            _add(loads, u, v, fallback * nbytes)
        p = route(g, ps, w, hops)
        for u, v in list(zip(p, p[1:]))[1 if multicast else 0:]:
            _add(loads, u, v, nbytes)
    if multicast:
        _add(loads, ps, ps_tor, nbytes)
    for tor in racks:
        if tor != ps_tor:
            p = route(g, next(w for w in others if _edge(g, w) == tor), ps, hops)[1:-1]   # ToR .. PS's ToR
            for u, v in zip(p, p[1:]):
                _add(loads, u, v, agg)
    _add(loads, ps_tor, ps, agg)
    return loads


def atp_seconds(spec: RunSpec, g: nx.Graph, fallback: float = 0.0) -> float:
    """ATP's wire time, every job at once (atp_loads): one frame per K-block per worker
    (int32: no lead frames), a `fallback` share of them summed at the PS alone."""
    nbytes = -(-spec.elements // wire.K) * wire.FRAME_BYTES
    loads: Loads = {}
    for hosts in tenant_hosts(g, spec.jobs, spec.placement):
        for edge, b in atp_loads(g, hosts, nbytes, fallback, spec.atp_multicast).items():
            _add(loads, *edge, b)
    return link_seconds(g, loads)


def sparse_kblocks(spec: RunSpec) -> dict[int, set[int]]:
    """Per rank, the K-blocks its input has non-zero (the run's own workload and seed)."""
    g = spec.blocks // wire.K
    nb = -(-spec.elements // wire.K)
    out = {}
    for r in range(spec.workers):
        ids = ([] if r < spec.zero_workers else
               nonzero_block_ids(r, spec.elements, spec.density, spec.pattern, spec.blocks, spec.seed))
        out[r] = {int(b) * g + i for b in ids for i in range(g) if int(b) * g + i < nb}
    return out


def sparse_acks(mine: set[int], rounds: list[int], columns: int) -> int:
    """Header-only ACKs a subtree whose workers send the K-blocks `mine` sends up a call
    whose sparse rounds are `rounds` (every worker's blocks) on `columns` slots.

    A worker acknowledges round m's result with an ACK when it sends nothing in its
    column's next round (or the column ends there): a packet for the next round says it
    otherwise (hosts/sparse_agent.py). A switch sends one ACK up once every child is done
    with m and none of them sent the next round (sparse.p4): the same rule over the
    subtree's blocks. Worked by hand in tests/test_wire_model_sparse.py."""
    by_column: dict[int, list[int]] = {}
    for m in sorted(rounds):
        by_column.setdefault(m % columns, []).append(m)
    return sum(1 for col in by_column.values() for after in col[1:] + [None] if after not in mine)


def sparse_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """Up a tree edge: the union of the subtree's non-zero K-blocks (one per worker below
    a host link) and its ACKs (sparse_acks); down: the union of every worker's; plus every
    slot's lead frame both ways. One tree carries it all (the sparse pipeline runs on the
    job's first tree)."""
    workers = ranked_workers(g)
    ts = trees.compute(spec.tree, g, workers)
    blocks = sparse_kblocks(spec)
    rank = {w: i for i, w in enumerate(workers)}
    lead = spec.default_window()
    everyone = set().union(*blocks.values()) if blocks else set()
    columns = min(lead, -(-spec.elements // wire.K))

    def up(t, node):
        mine = set().union(*(blocks[rank[w]] for w in below(t, node, set(workers))))
        acks = sparse_acks(mine, sorted(everyone), columns)
        return t.weight * ((len(mine) + lead) * wire.FRAME_BYTES + acks * wire.ACK_FRAME_BYTES)

    return link_seconds(g, tree_loads(ts, up, lambda t, n: t.weight * (len(everyone) + lead) * wire.FRAME_BYTES))


def gradient_bytes(spec: RunSpec) -> int:
    return spec.elements * 4


def ring_seconds(spec: RunSpec, g: nx.Graph) -> float:
    w = ranked_workers(g)
    n = len(w)
    each = tcp_bytes(2 * (n - 1) / n * gradient_bytes(spec))
    return link_seconds(g, flow_loads(g, [(w[r], w[(r + 1) % n], each) for r in range(n)])) if n > 1 else 0.0


def ps_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """Sharded PS: a worker pushes every other owner its shard (G/n) and pulls its own
    summed shard back to every other worker (G/n): 2G/n per ordered pair. Central PS: every
    other worker pushes G to rank 0's host and gets G back."""
    w = ranked_workers(g)
    n = len(w)
    if spec.ps_layout == "central":
        each = tcp_bytes(gradient_bytes(spec))
        return link_seconds(g, flow_loads(g, [f for b in w[1:] for f in ((b, w[0], each), (w[0], b, each))]))
    each = tcp_bytes(2 * gradient_bytes(spec) / n)
    return link_seconds(g, flow_loads(g, [(a, b, each) for a in w for b in w if a != b]))


def bml_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """BML's stages back to back, each as long as its busiest link; only the first starts
    with full htb buckets (`_drained`)."""
    sched = trees.compute("bml", g, ranked_workers(g)).schedule
    parts = sched.levels
    stages: list[Loads] = []
    if spec.bml_variant == "host":
        piece = tcp_bytes(gradient_bytes(spec) / parts / len(sched.hosts))
        for stage in sched.stages:
            loads: Loads = {}
            for t in stage:
                _add(loads, t.src, t.via, piece)
                _add(loads, t.via, t.dst, piece)
            stages.append(loads)
    else:
        part = frames(spec, spec.elements // parts) * wire.FRAME_BYTES
        for stage in sched.in_network:
            loads = {}
            for step in stage:
                _star(loads, step.switch, step.members, part)
            stages.append(loads)
    after = _drained(g)
    return sum(link_seconds(g if i == 0 else after, loads) for i, loads in enumerate(stages))


def _drained(g: nx.Graph) -> nx.Graph:
    """`g` for a stage that follows another at once: its links' buckets are empty.

    Why: every BML stage uses every server NIC (its parts take different levels), so the
    link that sets a stage's length was busy up to its start and its bucket never refills.
    Measured (`make experiment BACKEND=bmv2`, 2026-12-06): host BML at 0.4 Mb/s, its
    bottleneck NIC 98-102% busy over the whole 1.8 s run; a full 5,000 B bucket counted at
    each of the 4 stages took 0.4 s off its 1.56 s of bytes (a bound of 1.16 s, the run 1.55x
    it), against 2.5% at the twin's 5 Mb/s: the BMv2 bound was 29% further from the twin's."""
    out = g.copy()
    out.graph["buckets"] = False
    return out


def _star(loads: Loads, switch: str, members, nbytes: float) -> None:
    """An in-network group step: each member sends `nbytes` to `switch` and gets as much back."""
    for h in members:
        _add(loads, h, switch, nbytes)
        _add(loads, switch, h, nbytes)


def bml_relay_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """BML re-planned around a failure (controller/trees/bml_relay.py): its group steps one
    after the other, each a star allreduce of the whole gradient through one level switch:
    every member sends its frames to the switch and gets the sum back."""
    plan = relay_plan(g, ranked_workers(g))
    each = frames(spec) * wire.FRAME_BYTES
    total = 0.0
    for step in plan.steps:
        loads: Loads = {}
        _star(loads, step.switch, step.members, each)
        total += link_seconds(g, loads)
    return total


# a scheme's wire model by the name its controller module gives (controller/schemes/NAME.py
# WIRE_MODEL); a scheme without one has no bound
MODELS: dict[str, Callable[[RunSpec, nx.Graph], float]] = {
    "tree": innet_seconds, "sparse": sparse_seconds, "ring": ring_seconds, "ps": ps_seconds, "atp": atp_seconds}


def one_graph_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """The wire time on `g` as it is: BML's schedule for an in-network scheme on BCube (its
    job is BML's whatever the scheme), else the scheme's own model."""
    if spec.tree == BCUBE_TREE and SCHEMES[spec.algorithm].in_network:
        try:
            return bml_seconds(spec, g)
        except trees.TreeError:          # a failed NIC or level switch: the relay re-plan
            if spec.bml_variant == "host":
                raise BoundError("the host variant of BML does not re-plan around a failure") from None
            return bml_relay_seconds(spec, g)
    try:
        model = MODELS[WIRE_MODELS[spec.algorithm]]
    except KeyError:
        raise BoundError(f"--algorithm {spec.algorithm} has no wire model (controller/schemes/"
                         f"{spec.algorithm}.py WIRE_MODEL, one of {', '.join(MODELS)})") from None
    return model(spec, g)


def reroutes(spec: RunSpec, g: nx.Graph, a: str, b: str) -> bool:
    """Whether link a-b failing on `g` makes a dense in-network job reroute: its scheme's
    model is the trees' (`tree`, not BML's schedule) and an active tree of some job uses the
    link (controller/tree_job.py `link_marked`: a link no tree uses changes nothing)."""
    if spec.tree == BCUBE_TREE or WIRE_MODELS.get(spec.algorithm) != "tree":
        return False
    return any(trees.compute(spec.tree, g, hosts).uses(a, b) for hosts in tenant_hosts(g, spec.jobs, spec.placement))


def resend_seconds(spec: RunSpec, g: nx.Graph) -> float:
    """What a reroute adds on the wire: with the new epoch every worker rebuilds each packet
    still outstanding and sends it again at once (hosts/slots.py `poll_control`), one per
    slot of its window, on the new trees of `g`; their links were busy up to the failure, so
    no bucket helps (`_drained`).

    Why it is counted: mid-call every slot is outstanding, so a reroute resends the whole
    window (the run records window x workers retransmissions per failure), and the window
    does not shrink with the gradient. Measured in BMv2's suite (leaf-spine, 8 workers, 0.45
    Mb/s host links, 11,776 int32: 185 frames a worker, window 16, 128 retransmissions per
    failure): RAT ran 1.11x the wire time without this with one failure and 1.16-1.20x with
    two; with it, 1.00x and 0.96-0.98x (docs/measurements.md, 2026-12-07).

    Why the reroute's own time is not: the freeze (recompute and install, 51-77 ms a failure
    on BMv2, a few on the twin) idles the links for less than their htb bucket holds (0.1 s
    of a 0.225 Mb/s uplink, ground/links.py), which refills meanwhile and is sent at once
    after: the runs above show no cost beyond the resent frames."""
    return innet_seconds(spec, _drained(g), spec.default_window())


def wire_seconds(spec: RunSpec, g: nx.Graph | None = None) -> float:
    """One allreduce's wire time on the run's network (emulated seconds), link failures
    included: the bytes after each failure's fraction run on the graph without its link,
    and a reroute's resent window on the new trees (`resend_seconds`)."""
    g = topologies.for_run(spec) if g is None else g.copy()
    fails = sorted(spec.fail_specs, key=lambda f: f.at)
    if any(f.link is None for f in fails):
        raise BoundError("tree@F picks its link at run time: no bound")
    total, done = 0.0, 0.0
    for f in fails:
        total += (f.at - done) * one_graph_seconds(spec, g)
        done = f.at
        rerouted = reroutes(spec, g, *f.link)
        mark_link(g, *f.link, up=False)
        if rerouted:
            total += resend_seconds(spec, g)
    return total + (1 - done) * one_graph_seconds(spec, g)


