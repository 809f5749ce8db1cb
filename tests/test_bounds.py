"""The wire model (emulation/wire_model.py) and the claims' bounds (experiments/bounds.py) on
small networks worked by hand.

Every expected value is arithmetic written out in the comments, from the frame sizes of
the program variant (K values: a 58 + 4K B aggregation frame, 314 B at K = 64 and 1,082 B at
K = 256; TCP: 1448 B of payload in a 1514 B frame), never a call to the code under test.
The comments give the K = 64 figures; the K = 256 ones follow from FRAME and G below.
Common to all: 100 K-blocks = 6,400 int32 = 25,600 B per worker (102,400 B at K = 256),
window 4, so a dense call sends 100 + 1 (int32: slot 0's lead) = 101 frames = 31,714 B
(109,282 B) each way on a tree edge; a sparse call leads on every slot: its blocks + 4.
"""

from __future__ import annotations

import pytest

from agglab.controller import topologies
from agglab.emulation import wire_model as bounds
from agglab.experiments import bounds as claim_bounds
from agglab.experiments.analysis import Verdict
from agglab.experiments.definition import Claim
from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from agglab.hosts.sparse_workload import nonzero_block_ids

K = wire.K
ELEMENTS, WINDOW = 100 * K, 4  # 100 K-blocks
FRAME = 58 + 4 * K            # an aggregation frame: 314 B at K=64, 1,082 B at K=256
G = 4 * ELEMENTS              # gradient bytes per worker: 25,600 B (102,400 B)
DENSE = 101 * FRAME           # 31,714 B (109,282 B): a dense call's frames each way on a tree edge
TCP = 1514 / 1448             # wire bytes per TCP payload byte
# ring (or PS) bytes on a bottleneck over in-network's, worked out below for each variant:
# 1.5 G x TCP / DENSE = 40,150.3 / 31,714 = 1.2660 (160,601.1 / 109,282 = 1.4696) and
# 2 G x TCP / DENSE = 53,535 / 31,714 = 1.6880 (214,132 / 109,282 = 1.9595)
RING_OVER_INNET = {64: 1.2660, 256: 1.4696}[K]
TWO_G_OVER_INNET = {64: 1.6880, 256: 1.9595}[K]


def ideal(g):
    """The byte arithmetic below on links without htb's bucket (tested on its own at the end)."""
    g.graph["buckets"] = False
    return g


def spec(**kw) -> RunSpec:
    return RunSpec(**{"elements": ELEMENTS, "window": WINDOW, **kw})


def seconds(nbytes: float, mbps: float) -> float:
    return nbytes * 8 / (mbps * 1e6)


def test_in_network_and_ring_on_one_switch():
    """4 workers on one 10 Mb/s switch. In-network: every host link carries 31,714 B each
    way. Ring: each host sends 2(n-1)/n = 1.5 x 25,600 = 38,400 B of payload to its right
    neighbour, 38,400 x 1514/1448 = 40,150.3 B on the wire, one flow per link direction."""
    g = ideal(topologies.single_switch(4, bw=10))
    innet = bounds.wire_seconds(spec(workers=4, bw=10), g)
    ring = bounds.wire_seconds(spec(workers=4, bw=10, algorithm="ring"), g)
    assert innet == pytest.approx(seconds(DENSE, 10))               # 0.0254 s at K=64
    assert ring == pytest.approx(seconds(1.5 * G * TCP, 10))         # 0.0321 s at K=64
    assert ring / innet == pytest.approx(RING_OVER_INNET, rel=1e-4)   # 1.2660 at K=64


def test_sharded_ps_on_one_switch_moves_what_ring_moves():
    """PS with 4 workers: each ordered pair carries 2G/n = 12,800 B; a host sends it to 3
    peers: 38,400 B of payload on its link, as ring does."""
    g = ideal(topologies.single_switch(4, bw=10))
    ps = bounds.wire_seconds(spec(workers=4, bw=10, algorithm="ps"), g)
    assert ps == pytest.approx(seconds(1.5 * G * TCP, 10))


def test_a_central_ps_host_link_carries_every_other_workers_gradient():
    """Central PS with 4 workers: rank 0's host link carries 3 gradients in (pushes) and 3 out
    (sums), each G of TCP payload: 3G per direction, against the sharded PS's 1.5G."""
    g = ideal(topologies.single_switch(4, bw=10))
    central = bounds.wire_seconds(spec(workers=4, bw=10, algorithm="ps", ps_layout="central"), g)
    assert central == pytest.approx(seconds(3 * G * TCP, 10))


def test_in_network_time_does_not_grow_with_workers():
    """2 or 16 workers on one switch: the same 31,714 B per host link -> t16/t2 = 1."""
    t2 = bounds.wire_seconds(spec(workers=2, bw=10), ideal(topologies.single_switch(2, bw=10)))
    t16 = bounds.wire_seconds(spec(workers=16, bw=10), ideal(topologies.single_switch(16, bw=10)))
    assert t16 / t2 == pytest.approx(1.0)


def test_rat_vs_ps_on_an_oversubscribed_leaf_spine():
    """2 racks x 2 hosts, one spine, host links 100 Mb/s, uplinks 50 (1:4). PS: rack 1's
    two hosts send 2G/4 = 12,800 B to each of the 2 remote hosts: 4 x 12,800 = 51,200 B
    of payload up l1->s1, 53,535 B on the wire at 50 Mb/s = 8.566 ms (a host link carries
    3 x 12,800 = 38,400 B at 100: less). RAT: the rack's uplink carries the whole
    aggregation once, 31,714 B at 50 Mb/s = 5.074 ms. PS/RAT = 53,535 / 31,714 = 1.688."""
    g = ideal(topologies.leaf_spine(2, 2, 1, host_bw=100, uplink_bw=50, workers=4))
    ps = bounds.wire_seconds(spec(workers=4, algorithm="ps"), g)
    rat = bounds.wire_seconds(spec(workers=4, tree="rat"), g)
    assert ps == pytest.approx(seconds(2 * G * TCP, 50))            # 4 x 2G/4
    assert rat == pytest.approx(seconds(DENSE, 50))
    assert ps / rat == pytest.approx(TWO_G_OVER_INNET, rel=1e-3)


def test_packing_vs_one_tree_with_a_slow_uplink():
    """One host per rack (h1 on l1, h2 on l2), spines s1 and s2, every link 100 Mb/s but
    l1-s1 at 25. One shortest-path tree is rooted at the central switch s1 (ties go to
    the first name) and crosses l1-s1: 31,714 B at 25 Mb/s = 10.15 ms. Packed trees split
    the gradient between the spines in proportion to their rates (25 : 100): the s1 tree's
    share 0.2 x 31,714 at 25 = 2.03 ms, the s2 tree's 0.8 x 31,714 at 100 = 2.03 ms, and
    every host link carries all of it, 31,714 B at 100 = 2.54 ms: the host links bind.
    one tree / packed = 100 / 25 = 4."""
    g = ideal(topologies.leaf_spine(2, 1, 2, host_bw=100, uplink_bw=100, workers=2))
    g.edges["l1", "s1"]["bw"] = 25
    one = bounds.wire_seconds(spec(workers=2, tree="spt"), g)
    packed = bounds.wire_seconds(spec(workers=2, tree="packing"), g)
    assert one == pytest.approx(seconds(DENSE, 25))
    # Garg-Koenemann packs to within its epsilon (0.1) of the best rates
    assert packed == pytest.approx(seconds(DENSE, 100), rel=0.1)
    assert one / packed == pytest.approx(4.0, rel=0.1)


RESENT = WINDOW * FRAME       # a reroute's resend: every worker's window, 4 x 314 = 1,256 B (4,328 B)


def test_ring_vs_rat_with_an_uplink_failing_half_way():
    """2 racks x 2 hosts, 2 spines, host links 100, uplinks 50 (1:2); l1-s1 fails at half
    the blocks. RAT: with both spines, its LP halves the gradient over them: an uplink
    carries 0.5 x 31,714 at 50 = a host link's 31,714 at 100 = 2.537 ms; after the failure
    l1-s2 carries all of it at 50 = 5.074 ms; half of each: 3.806 ms. The reroute (l1-s1 was
    on a tree) resends every worker's window of 4 frames on the new tree: 1,256 B more on l1-s2
    at 50 = 0.201 ms, 4.007 ms. Ring: the one flow leaving each rack (h2->h3, h4->h1) is
    38,400 x 1514/1448 = 40,150.3 B on a 50 Mb/s uplink, 6.424 ms, before and after (the other
    spine takes it; a host baseline resends nothing of the controller's). Ring/RAT =
    40,150.3 / (0.75 x 31,714 + 1,256) = 1.6033 (160,601.1 / (81,961.5 + 4,328) = 1.8612)."""
    g = ideal(topologies.leaf_spine(2, 2, 2, host_bw=100, uplink_bw=50, workers=4))
    fail = ["l1-s1@0.5"]
    rat = bounds.wire_seconds(spec(workers=4, tree="rat", fail=fail), g)
    ring = bounds.wire_seconds(spec(workers=4, algorithm="ring", fail=fail), g)
    assert rat == pytest.approx(0.5 * seconds(DENSE, 100) + 0.5 * seconds(DENSE, 50) + seconds(RESENT, 50))
    assert ring == pytest.approx(seconds(1.5 * G * TCP, 50))
    assert ring / rat == pytest.approx({64: 1.6033, 256: 1.8612}[K], rel=1e-3)
    assert g.edges["l1", "s1"].get("up", True)         # the caller's graph is left as it was


def test_a_reroute_resends_its_window_only_when_its_trees_used_the_link():
    """The same leaf-spine, one tree (spt: both leaves to s1, so an uplink at 50 carries a
    whole call: 31,714 B = 5.074 ms). l1-s2, which no tree uses, failing at a quarter: no
    reroute, nothing resent, the same tree after: 5.074 ms. l1-s1 failing at half instead: the
    tree moves to s2, whose uplinks at 50 carry the second half as s1's did the first, and
    every worker resends its 4 frames there: 1,256 B more at 50 = 0.201 ms; 5.275 ms."""
    g = ideal(topologies.leaf_spine(2, 2, 2, host_bw=100, uplink_bw=50, workers=4))
    untouched = bounds.wire_seconds(spec(workers=4, tree="spt", fail=["l1-s2@0.25"]), g)
    assert untouched == pytest.approx(seconds(DENSE, 50))
    moved = bounds.wire_seconds(spec(workers=4, tree="spt", fail=["l1-s1@0.5"]), g)
    assert moved == pytest.approx(seconds(DENSE, 50) + seconds(RESENT, 50))


def test_a_failure_picked_at_run_time_has_no_bound():
    g = ideal(topologies.single_switch(4, bw=10))
    with pytest.raises(bounds.BoundError, match="tree@F picks its link at run time: no bound"):
        bounds.wire_seconds(spec(workers=4, fail=["tree@0.5"]), g)


def test_sparse_ceiling_is_one_over_density_plus_the_lead():
    """2 workers, overlapping blocks at density 0.1: both have the same round(0.1 x 100) =
    10 non-zero K-blocks, so a host link carries 10 + 4 (a lead per slot) = 14 frames each
    way against the dense 101, and on the way up a 58-byte ACK after each column's last
    round (both send every round: no ACK before), one per column holding a block:
    speed-up bound about 101 / 14 = 7.21 (not 10: the lead frames)."""
    g = ideal(topologies.single_switch(2, bw=10))
    blocks = nonzero_block_ids(0, ELEMENTS, 0.1, "overlap")
    assert len(blocks) == 10 and list(blocks) == list(nonzero_block_ids(1, ELEMENTS, 0.1, "overlap"))
    acks = len({int(b) % WINDOW for b in blocks})
    dense = bounds.wire_seconds(spec(workers=2), g)
    sparse = bounds.wire_seconds(spec(workers=2, algorithm="omnireduce", density=0.1, pattern="overlap"), g)
    assert sparse == pytest.approx(seconds(14 * FRAME + acks * 58, 10))
    assert dense / sparse == pytest.approx(101 * FRAME / (14 * FRAME + acks * 58))


def test_sparse_random_blocks_come_back_as_their_union():
    """Random blocks: each worker sends its own 10 up; the switch returns the union. The
    union is counted here from the workload's own draws (seed 0)."""
    g = ideal(topologies.single_switch(2, bw=10))
    union = len(set(nonzero_block_ids(0, ELEMENTS, 0.1)) | set(nonzero_block_ids(1, ELEMENTS, 0.1)))
    assert 10 < union <= 20
    sparse = bounds.wire_seconds(spec(workers=2, algorithm="omnireduce", density=0.1, pattern="random"), g)
    assert sparse == pytest.approx(seconds((union + 4) * FRAME, 10))


def test_bml_stages_on_bcube_2_1():
    """BCube(2,1): 4 servers with 2 NICs, 10 Mb/s. Host BML: 2 parts x 4 pieces of G/8 =
    3,200 B. Per NIC and stage a server sends: reduce-scatter 2 pieces then 1, all-gather 1
    then 2: 6 pieces = 19,200 B of payload over the 4 stages, each stage as long as one
    NIC's share: 19,200 x 1514/1448 B at 10 Mb/s = 16.06 ms. In-network: 2 stages, each
    member sends its half (50 blocks + 1 lead = 51 frames = 16,014 B) to the level switch
    and gets the sum back: 2 x 16,014 B at 10 Mb/s = 25.62 ms."""
    g = ideal(topologies.bcube(2, 1, bw=10, workers=4))
    host = bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml", bml_variant="host"), g)
    innet = bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml"), g)
    assert host == pytest.approx(seconds(0.75 * G * TCP, 10))        # 6 pieces of G/8
    assert innet == pytest.approx(seconds(2 * 51 * FRAME, 10))


def test_bml_stages_share_one_bucket():
    """The same BCube(2,1) at 0.48 Mb/s, links with htb's bucket (6,000 B there): BML's stages
    run back to back on every NIC, so only the first stage's links start with a full bucket.
    Host: the NIC's 6 pieces of G/8 over the 4 stages, less one bucket: 19,200 x 1514/1448 -
    6,000 B (counting a bucket per stage would make the two 1-piece stages, 3,345.6 B each,
    free). In-network: 2 x 16,014 B less one bucket."""
    g = topologies.bcube(2, 1, bw=0.48, workers=4)
    host = bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml", bml_variant="host"), g)
    innet = bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml"), g)
    assert host == pytest.approx(seconds(0.75 * G * TCP - 6000, 0.48))
    assert innet == pytest.approx(seconds(2 * 51 * FRAME - 6000, 0.48))


def test_ps_across_a_fat_tree_follows_the_installed_routes():
    """Fat-tree k=4, 10 Mb/s, 4 workers, one per pod (h1, h5, h9, h13). The switches'
    shortest-path next hops take the first name at every tie, so every pair crosses core
    c1 (h1 -> e1 -> a1 -> c1 -> a3 -> e3 -> h5). A PS pair carries 2G/4 = 12,800 B; a
    host sends to 3 peers: 38,400 B on its own link and on its pod's a->c1 link alike
    (those carry only that host's flows), 38,400 x 1514/1448 B at 10 Mb/s = 32.12 ms."""
    g = ideal(topologies.fat_tree(4, bw=10, workers=4))
    assert bounds.route(g, "h1", "h5") == ["h1", "e1", "a1", "c1", "a3", "e3", "h5"]
    ps = bounds.wire_seconds(spec(workers=4, topology="fattree", algorithm="ps"), g)
    assert ps == pytest.approx(seconds(1.5 * G * TCP, 10))


@pytest.mark.parametrize("ours,bound,want", [
    (5.5, 5.04, "matches its bound"), (4.6, 5.04, "matches its bound"),
    (3.0, 5.0, "40% below its bound"), (6.0, 5.0, "20% above its bound"),
    (float("nan"), 5.0, "–"), (5.0, float("nan"), "–"),
])
def test_compare(ours, bound, want):
    assert claim_bounds.compare(ours, bound) == want


def test_a_verdict_says_how_far_it_is_from_its_bound():
    c = Claim("x", {}, {}, 25.0, "at_least", 0.2, bound="wire_time")
    assert Verdict(c, 2.5, 2.4, 2.6, "weaker", 0, bound=5.0).against_bound == "50% below its bound"


def test_every_shipped_allreduce_claim_has_a_bound(tmp_path):
    """The default suite's claims, planned as `make experiment` plans them: each one's
    bound comes out of its points' topology, rates and bytes (PACE's needs its runs)."""
    from agglab.controller.schemes import WIRE_MODELS
    from agglab.experiments.analysis import claim_bound
    from agglab.experiments.runner import load_suite

    suite = load_suite(__import__("pathlib").Path(__file__).parent.parent / "experiments/configs/default.yaml")
    seen = 0
    for d in suite.definitions:
        d.points(suite.ceiling_mbps, tmp_path / "topologies")
        for c, _ in d.claims():
            value, why = claim_bound([], d, c)
            if d.program == "pace":
                assert c.bound == "pace_model" and value != value and "measured cost" in why
                continue
            if any(f.startswith("tree@") for sel in (c.num, c.den) for p in d.built
                   if p.series == sel.get("series") for f in p.spec.fail):
                assert value != value and "tree@F" in why      # the link is picked at run time
                continue
            if any(p.spec.algorithm not in WIRE_MODELS for sel in (c.num, c.den) for p in d.built
                   if p.series == sel.get("series")):
                assert value != value and "has no wire model" in why   # ATP's pool: no bound, said so
                continue
            # jobs that train (ATP's): their training model, bytes and compute until runs give round trips
            assert c.bound == ("training" if d.built[0].spec.training else "wire_time") and value > 0, \
                (d.name, c.text, why)
            seen += 1
    assert seen >= 15


def test_a_links_full_bucket_leaves_at_once():
    """An idle htb link starts with its bucket full (ground/links.py: 2 ms of the link, at
    least 6,000 B), so the wire time counts the bytes after it. One tree through a
    0.048 Mb/s link measured 5.73 s for 40,506 B: 6.75 s without the bucket, 5.75 s with it.
    Here: 4 workers on one switch at 10 Mb/s, DENSE = 101 frames per host link each way;
    the bucket is 6,000 B at 10 Mb/s (2 ms would be 2,500 B) and 25,000 B at 100 Mb/s."""
    ideal_time = bounds.wire_seconds(spec(workers=4, bw=10), ideal(topologies.single_switch(4, bw=10)))
    real_time = bounds.wire_seconds(spec(workers=4, bw=10), topologies.single_switch(4, bw=10))
    assert ideal_time == pytest.approx(seconds(DENSE, 10))
    assert real_time == pytest.approx(seconds(DENSE - 6000, 10))
    fast = bounds.wire_seconds(spec(workers=4, bw=100), topologies.single_switch(4, bw=100))
    assert fast == pytest.approx(seconds(max(0, DENSE - 25000), 100))


def test_a_slow_links_bucket_is_at_most_a_tenth_of_a_second_of_it():
    """Below 0.48 Mb/s the 6,000 B minimum would be more than 0.1 s of the link (at 0.01 Mb/s,
    4.8 s in which the link carries twice its rate): 0.3 Mb/s gets 3,750 B (0.1 s), 0.1 Mb/s
    1,600 B (one full-size frame and a little, 0.128 s), 0.48 Mb/s still 6,000 B."""
    for bw, bucket in ((0.3, 3750), (0.1, 1600), (0.48, 6000)):
        g = topologies.single_switch(4, bw=bw)
        assert bounds.wire_seconds(spec(workers=4, bw=bw), g) == pytest.approx(seconds(DENSE - bucket, bw))


def test_a_failure_picked_at_run_time_is_bounded_by_the_link_the_run_recorded():
    """`tree@F` has no bound before a run; after one, the bound is the wire time with the
    link it failed (a leaf-spine uplink at half the blocks: as the hand-worked test above)."""
    from agglab.experiments.analysis import resolved

    g = ideal(topologies.leaf_spine(2, 2, 2, host_bw=100, uplink_bw=50, workers=4))
    row = {"ok": True, "spec": spec(workers=4, tree="rat", fail=["tree@0.5"]).to_dict(),
           "failures": [{"link": "l1-s1", "at": 0.5, "on_tree": True}]}
    concrete = resolved(row)
    assert concrete.fail == ["l1-s1@0.5"]
    assert bounds.wire_seconds(concrete, g) == pytest.approx(0.5 * seconds(DENSE, 100) + 0.5 * seconds(DENSE, 50)
                                                             + seconds(RESENT, 50))
    assert resolved({**row, "ok": False}) is None and resolved({**row, "failures": []}) is None


def test_bml_with_a_failed_server_link_half_way_follows_the_relay_re_plan():
    """BCube(2,1) at 10 Mb/s, h1-b1s1 failing at half the run. Before: BML's two in-network
    stages, 2 x 51 frames (see above). After, the relay re-plan: every level switch has two
    live servers, so the root is the first, b0s1 (h1, h2); h2 reaches b1s2 (h4), h4 reaches
    b0s2 (h3). Reduce deepest first: b0s2, b1s2, b0s1; broadcast back: b1s2, b0s2; 5 steps,
    each the whole gradient (100 blocks + 1 lead = DENSE) to its switch and back."""
    g = ideal(topologies.bcube(2, 1, bw=10, workers=4))
    innet = bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml", fail=["h1-b1s1@0.5"]), g)
    assert innet == pytest.approx(0.5 * seconds(2 * 51 * FRAME, 10) + 0.5 * 5 * seconds(DENSE, 10))
    with pytest.raises(bounds.BoundError, match="host variant"):
        bounds.wire_seconds(spec(workers=4, topology="bcube", tree="bml", bml_variant="host",
                                 fail=["h1-b1s1@0.5"]), g)

