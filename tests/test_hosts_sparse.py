"""The sparse agent (hosts/sparse_agent.py) against docs/design/'s sparse pipeline.

The switch is softswitch.Pipeline (real frames, CLI-programmed agg_job entries), so the
agent and the software switch are tested together; loss is in test_hosts_sparse_loss.py.
What each worker must send is computed here from docs/design/'s rule with plain loops
(`blocks_a_worker_sends`), not with hosts/sparse_blocks.py, whose vectorised version the
agent uses; the two are compared on hand-worked layouts and on every scenario.
"""

import numpy as np
import pytest

from agglab.ground import wire
from agglab.hosts import quantization as qz
from agglab.testkit.fakenet import _get
from agglab.hosts.agent import allreduce
from agglab.hosts.protocol import LAYOUT
from agglab.hosts.sparse_agent import DEFAULT_LOOKAHEAD, SparseMismatchError, SparseProtocolError
from agglab.hosts.sparse_blocks import announcements, nonzero_kblocks, sent_blocks
from agglab.hosts.sparse_workload import expected_sparse_sum, sparse_gradient
from agglab.testkit.fakenet import FakeNet, make_frame, sparse_net
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands

K = wire.K


def ok(results):
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def blocks_a_worker_sends(array, window, block_size=K, lookahead=DEFAULT_LOOKAHEAD) -> list[int]:
    """docs/design/, written as loops: with S = min(window, K-blocks) columns (column s holds
    K-blocks s, s+S, ...), after (virtually) sending m a worker announces, and later sends,
    the first K-block after m in m's column whose block_size block holds a non-zero value,
    or m + lookahead*S if that comes first; nothing beyond the array.  Its first block of a
    column, announced in the lead round, is s if that block holds a non-zero value, else
    what it would announce after s (no forced zero block s)."""
    flat = np.asarray(array).reshape(-1)
    nb = -(-flat.size // K)
    per_big = block_size // K
    big_nonzero = [bool(np.any(flat[b * block_size:(b + 1) * block_size])) for b in range(-(-nb // per_big))]
    S = min(window, max(nb, 1))
    sent = []
    for s in range(min(S, nb)):
        m, first = s, True
        while m < nb:
            if not first or big_nonzero[m // per_big]:
                sent.append(m)
            first = False
            nxt = m + S
            while nxt < nb and nxt < m + lookahead * S and not big_nonzero[nxt // per_big]:
                nxt += S
            m = nxt
    return sorted(sent)


def expected_blocks_sent(array, window, block_size=K, lookahead=DEFAULT_LOOKAHEAD) -> int:
    return len(blocks_a_worker_sends(array, window, block_size, lookahead))


@pytest.mark.parametrize("nb,nonzero,S,block_size,lookahead,sent", [
    # column 0 = 0 2 4 6 8, column 1 = 1 3 5 7 9; non-zero K-blocks 3 and 8; look-ahead 2 rounds.
    # The lead announces the first block: col 0: 0 is zero, 8 is beyond 0+2*2 so 4, then 8;
    # col 1: 1 is zero so 3, then nothing before 3+4 so 7
    (10, {3, 8}, 2, K, 2, [3, 4, 7, 8]),
    (10, {0, 8}, 2, K, 2, [0, 4, 5, 8, 9]),          # col 0 starts at its non-zero 0; col 1 (all zero): 1+4=5, 9
    (10, {3, 8}, 2, K, 64, [3, 8]),                  # no look-ahead bound within the array
    (10, set(), 2, K, 64, []),                       # nothing at all: the lead settles everything
    (10, set(), 1, K, 3, [3, 6, 9]),                 # one column: every third block after 0
    # 2K blocks: K-block 5 non-zero makes 4 and 5 travel (2K-block 2); S=3: cols 0 3 6 9 / 1 4 7 / 2 5 8
    (10, {5}, 3, 2 * K, 64, [4, 5]),
    (7, {6}, 4, K, 64, [6]),                         # columns 0 4 / 1 5 / 2 6 / 3: 6 is 2's first
])
def test_blocks_sent_rule_by_hand(nb, nonzero, S, block_size, lookahead, sent):
    """The hand-worked layouts (comments) pin both the test's loop rule and the agent's
    vectorised one (hosts/sparse_blocks.py)."""
    x = np.zeros(nb * K, np.int32)
    for b in nonzero:
        x[b * K + 1] = 1
    assert blocks_a_worker_sends(x, S, block_size, lookahead) == sent
    mask = nonzero_kblocks(x.reshape(nb, K), block_size)
    assert sent_blocks(mask, announcements(mask, S, lookahead), S) == sent


@pytest.mark.parametrize("pattern", ["random", "overlap", "disjoint"])
@pytest.mark.parametrize("density", [1.0, 0.5, 0.1, 0.01, 0.0])
def test_int32_exact_every_pattern_and_density(pattern, density):
    n, length, window = 4, K * 300 + 17, 16
    arrays = [sparse_gradient(r, length, "int32", density, pattern, K, seed=5) for r in range(n)]
    expected = expected_sparse_sum(n, length, "int32", density, pattern, K, seed=5)
    results = ok(sparse_net(n).run(arrays, sparse=True, window=window, give_up=10))
    blocks = -(-length // K)
    for rank, (out, stats) in enumerate(results):
        assert out.dtype == np.int32 and np.array_equal(out, expected)
        assert stats.blocks == blocks and stats.slots == window
        assert stats.blocks_sent == expected_blocks_sent(arrays[rank], window)
        # ~ density x blocks: plus block s of every column and one look-ahead block per 64 rounds
        assert abs(stats.blocks_sent - density * blocks) <= 1 + window * (1 + blocks // (64 * window) + 1)
        assert stats.packets_sent == stats.blocks_sent + window + stats.retransmissions + stats.acks  # probes: timer
    if density <= 0.1:
        assert results[0][1].blocks_sent < 0.25 * blocks        # really sparse on the wire


def test_int32_wraparound_and_workers_without_any_non_zero_block():
    """Ranks 1 and 3 have nothing at all; the others full-range values that wrap."""
    n, length = 5, K * 40 + 3
    rng = np.random.default_rng(1)
    arrays = [np.zeros(length, np.int32) for _ in range(n)]
    for r in (0, 2, 4):
        blocks = rng.choice(41, 12, replace=False)
        for b in blocks:
            arrays[r][b * K:(b + 1) * K] = rng.integers(-2**31, 2**31 - 1, K, dtype=np.int32)[:length - b * K]
    expected = np.sum(arrays, axis=0, dtype=np.int32)
    assert np.any(np.abs(expected.astype(np.int64)) > 0) and length % K
    results = ok(sparse_net(n).run(arrays, sparse=True, window=6, give_up=10))
    for rank, (out, stats) in enumerate(results):
        assert np.array_equal(out, expected)
        assert stats.blocks_sent == expected_blocks_sent(arrays[rank], 6)
    assert results[1][1].blocks_sent == 0                # nothing: its lead announced none
    big = np.sum([a.astype(np.int64) for a in arrays], axis=0)
    assert np.any(big != expected)                       # some sums really wrapped


@pytest.mark.parametrize("shape", [(0,), (5,), (K,), (3, 7, 11)])
def test_all_zero_for_all_workers_and_odd_shapes(shape):
    n = 3
    arrays = [np.zeros(shape, np.int32) for _ in range(n)]
    for out, stats in ok(sparse_net(n).run(arrays, sparse=True, window=4, give_up=10)):
        assert out.shape == shape and out.dtype == np.int32 and not out.any()
        assert stats.blocks_sent == 0 and stats.rounds == 0   # the lead settles every column


@pytest.mark.parametrize("block_size,sent", [(K, [2, 1]), (4 * K, [8, 4])])
def test_block_size_all_sub_blocks_travel(block_size, sent):
    """One non-zero value in a few 4K-blocks: with block_size 4K all four K-blocks travel."""
    n, length, window = 2, K * 4 * 20, 8                   # 80 K-blocks, 10 per column
    arrays = [np.zeros(length, np.int32) for _ in range(n)]
    arrays[0][[5, 4 * K * 7 + 3 * K + 1]] = [7, -9]          # K-blocks 0 and 31 (4K-blocks 0, 7)
    arrays[1][4 * K * 12 + K] = 11                           # K-block 49 (4K-block 12)
    results = ok(sparse_net(n).run(arrays, sparse=True, window=window, give_up=10,
                                            block_size=block_size))
    for rank, (out, stats) in enumerate(results):
        assert np.array_equal(out, arrays[0] + arrays[1])
        assert stats.blocks_sent == expected_blocks_sent(arrays[rank], window, block_size)
        # K-blocks {0, 31} / {49}, or the whole 4K-blocks 0..3 and 28..31 / 48..51
        assert stats.blocks_sent == sent[rank]
    with pytest.raises(ValueError, match="multiple of K"):
        allreduce(arrays[0], transport=None, rank=0, workers=1, sparse=True, block_size=K + 1)


@pytest.mark.parametrize("pattern", ["random", "disjoint"])
def test_float32_within_error_bound(pattern):
    n, length = 4, K * 90 + 9
    arrays = [sparse_gradient(r, length, "float32", 0.2, pattern, K, seed=8) for r in range(n)]
    rng = np.random.default_rng(3)
    scale = np.repeat(10.0 ** rng.integers(-5, 6, -(-length // K)), K)[:length]
    arrays = [(a * scale).astype(np.float32) for a in arrays]
    exact = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    padded = np.zeros(-(-length // K) * K)
    padded[:length] = np.max(np.abs(arrays), axis=0)
    bound = np.repeat([qz.error_bound(qz.block_exponent(b), n) for b in padded.reshape(-1, K)],
                      K)[:length]
    for out, _ in ok(sparse_net(n).run(arrays, sparse=True, window=8, give_up=10)):
        assert out.dtype == np.float32
        err = np.abs(out.astype(np.float64) - exact)
        assert np.all(err <= bound), (err / np.maximum(bound, 1e-300)).max()
        assert np.all(out[exact == 0] == 0)          # nobody sent: exact zeros
        assert np.any(err > 0)                       # really quantised


def test_lookahead_bounds_silence_and_costs_one_block_per_bound():
    """Worker 1 has a single non-zero block at the end of a long column (block 39): with
    lookahead 4 it still sends a zero block every 4 rounds (4, 8, ..., 36, then 39)."""
    n, length = 2, K * 40
    arrays = [np.arange(length, dtype=np.int32), np.zeros(length, np.int32)]
    arrays[1][-1] = 5
    for la in (1, 4, 64):
        results = ok(sparse_net(n).run(arrays, sparse=True, window=1, lookahead=la,
                                                give_up=10))
        for rank, (out, stats) in enumerate(results):
            assert np.array_equal(out, arrays[0] + arrays[1])
            assert stats.blocks_sent == expected_blocks_sent(arrays[rank], 1, lookahead=la)
        assert results[1][1].blocks_sent == {1: 39, 4: 10, 64: 1}[la]


def test_dense_and_sparse_workers_in_one_job_raise():
    arrays = [np.ones(K * 8, np.int32)] * 2
    results = sparse_net(2).run(arrays, window=4, give_up=1,
                                         per_rank=[{"sparse": True}, {}])
    assert isinstance(results[0], SparseMismatchError), results
    assert "only 1 of 2 workers run the sparse allreduce" in str(results[0])


class _Scripted:
    """One worker on a Pipeline, answered at once; `next_of` rewrites the next_block of the
    results with flag `flag` (sparse, or the lead) (to play a switch with stale sp_next
    registers)."""

    def __init__(self, next_of, flag=wire.CONST["AGG_FLAG_SPARSE"]):
        self.switch, self.out, self.next_of, self.flag = sparse_net(1).switch, [], next_of, flag

    def send(self, payload):
        for _port, frame in self.switch.process(1, make_frame(0, payload)):
            res = bytes(frame[wire.AGG_OFFSET:])
            if _get(res, "flags") & self.flag:
                res = _with_next(res, self.next_of(_get(res, "next_block")))
            self.out.append(res)

    def recv(self, timeout):
        return self.out.pop(0) if self.out else None


def _with_next(payload: bytes, nxt: int) -> bytes:
    words = list(wire.AGG_STRUCT.unpack_from(payload))
    word, shift, mask = LAYOUT["next_block"]
    words[word] = (words[word] & ~(mask << shift)) | (nxt << shift)
    return wire.AGG_STRUCT.pack(*words) + payload[wire.AGG_HEADER_BYTES:]


def test_result_naming_a_later_next_than_announced_is_refused():
    """A switch whose sp_next still holds another run's announcements (a second sparse run
    without reset) can name a next block beyond this worker's own: refusing beats summing."""
    x = np.zeros(K * 10, np.int32)
    x[[0, 3 * K]] = 1                                        # sends block 0, announces block 3
    out = allreduce(x, transport=_Scripted(lambda nxt: nxt), rank=0, workers=1, window=1,
                    sparse=True)
    assert np.array_equal(out, x)
    with pytest.raises(SparseProtocolError, match="block 0 names next block.*announced 0x3.*stale"):
        allreduce(x, transport=_Scripted(lambda nxt: wire.NEXT_NONE), rank=0, workers=1,
                  window=1, sparse=True)
    x[0] = 0                                                 # the lead announces block 3
    with pytest.raises(SparseProtocolError, match="lead result names first block 0xffffffff.*"
                                                  "announced 0x3.*stale"):
        allreduce(x, transport=_Scripted(lambda nxt: wire.NEXT_NONE, wire.CONST["AGG_FLAG_LEAD"]),
                  rank=0, workers=1, window=1, sparse=True)


def test_progress_and_trees():
    n, length = 2, K * 50
    arrays = [sparse_gradient(r, length, "int32", 0.2, "random", K, seed=2) for r in range(n)]
    from agglab.softswitch.pipeline import Pipeline
    from agglab.softswitch.star import star_commands
    from agglab.testkit.fakenet import FakeNet

    pipeline = Pipeline(seed=0)
    for cmd in star_commands(n, tree=1) + [
            f"table_add agg_job agg_child 0 3 0 {i + 1} => {i} {n} 1 4 1020 65535" for i in range(n)]:
        pipeline.command(cmd)
    net = FakeNet(n, backend="pipeline", pipeline=pipeline)
    net.record = True
    calls = [[], []]
    ok(net.run(arrays, sparse=True, window=4, per_rank=[
        {"tree_of_slot": [3, 1, 3, 1], "on_progress": lambda d, t: calls[0].append((d, t))},
        {"tree_of_slot": [3, 1, 3, 1], "on_progress": lambda d, t: calls[1].append((d, t))}]))
    assert {(slot, tree) for _, slot, tree, _ in net.sent} == {(0, 3), (1, 1), (2, 3), (3, 1)}
    for c in calls:
        done = [d for d, _ in c]
        assert done == sorted(done) and done[-1] == 50 and {t for _, t in c} == {50}
        assert len(c) < 50                       # one call per round, rounds skip blocks
