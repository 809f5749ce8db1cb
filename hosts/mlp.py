"""A numpy MLP trained data-parallel on scikit-learn's digits, and its one-process reference.

Why this model: a real data set that a registry package ships (no download), small
enough that 100+ allreduces of its gradient through the Python switch take seconds, and
deterministic: the same (seed, rank, step) gives the same minibatch everywhere.

Data parallelism (`train`): rank r owns the training samples r, r+n, r+2n, ...; at step t it
draws a minibatch from its shard with the generator seeded (seed, t, r), computes the mean
gradient of its minibatch, encodes it (`Encoding`), and the sum over ranks of the encoded
gradients is the update: params -= lr * decode(sum) / n. `reduce` is that sum: the
emulated network's allreduce in a worker, or an in-process loop over all ranks in the
reference (`train_single_process`), which runs every rank's shard in one process.

Exact aggregation (`--dtype int32`, the default): the gradient is clipped to
|g| <= C = floor((2^31-1) / n / 2^16) and rounded to a fixed-point int32 with 2^16 steps
per unit (`quantize`); int32 sums are exact (the switch sums like numpy, with
wrap-around that the clip rules out), so the one-process reference, which applies the
same clip and rounding to each rank's gradient, computes bit-identical parameters.
float32 (`--dtype float32`): the switch's own float path (per-block exponent, SwitchML
fixed point); the reference sums the float32 gradients in float64. Per step and element
the aggregate differs by at most agglab.hosts.quantization.error_bound (about n^2 * max|g| *
2^-31); over a run these differences feed back through later gradients, so the reported
parameter difference is compared with the first-order bound lr/n * sum of per-step bounds
only as a guide.

Top-k (`topk` = F < 1): each rank keeps the F fraction of its K-value blocks with the
largest L2 norm and carries the rest to the next step (error feedback); the zero blocks are
what the sparse pipeline (omnireduce) skips. The reference keeps a residual per rank too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agglab.ground import wire
from agglab.hosts import quantization as qz

FRACTION_BITS = 16


@dataclass
class Config:
    workers: int = 4
    steps: int = 120
    batch: int = 32               # samples per rank and step
    lr: float = 0.5
    hidden: int = 32
    seed: int = 0
    dtype: str = "int32"          # int32: fixed-point exact aggregation; float32: switch float path
    topk: float = 1.0             # fraction of K-value gradient blocks each rank sends
    eval_every: int = 10


def load_digits_split(seed: int):
    """scikit-learn's 8x8 digits (1,797 images, shipped with the package), pixels / 16,
    split 80/20 by a seeded permutation."""
    from sklearn.datasets import load_digits  # lazy: scikit-learn, only load_digits_split() needs it

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


class MLP:
    """64 -> hidden (tanh) -> 10 (softmax); all parameters in one float32 vector."""

    def __init__(self, inputs: int, hidden: int, classes: int, seed: int):
        self.shapes = [(inputs, hidden), (hidden,), (hidden, classes), (classes,)]
        rng = np.random.default_rng(seed)
        w1 = rng.normal(0, 1 / np.sqrt(inputs), (inputs, hidden))
        w2 = rng.normal(0, 1 / np.sqrt(hidden), (hidden, classes))
        self.params = np.concatenate([w1.ravel(), np.zeros(hidden), w2.ravel(), np.zeros(classes)]
                                     ).astype(np.float32)

    def _unpack(self, flat):
        out, i = [], 0
        for shape in self.shapes:
            n = int(np.prod(shape))
            out.append(flat[i:i + n].reshape(shape))
            i += n
        return out

    def forward(self, x):
        w1, b1, w2, b2 = self._unpack(self.params)
        h = np.tanh(x @ w1 + b1)
        z = h @ w2 + b2
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return h, p / p.sum(axis=1, keepdims=True)

    def loss_and_gradient(self, x, y):
        w1, b1, w2, b2 = self._unpack(self.params)
        h, p = self.forward(x)
        loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
        dz = p.copy()
        dz[np.arange(len(y)), y] -= 1
        dz /= len(y)
        dh = (dz @ w2.T) * (1 - h * h)
        grad = np.concatenate([(x.T @ dh).ravel(), dh.sum(0), (h.T @ dz).ravel(), dz.sum(0)])
        return loss, grad.astype(np.float32)

    def evaluate(self, x, y) -> tuple[float, float]:
        _, p = self.forward(x)
        return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean()), float((p.argmax(1) == y).mean())


def clip_limit(workers: int) -> float:
    """Largest |g| whose fixed-point value summed over `workers` ranks fits in int32."""
    return float((qz.INT32_MAX // workers) >> FRACTION_BITS)


@dataclass
class Encoding:
    """How a rank's gradient becomes what the network sums, and back."""
    workers: int
    dtype: str = "int32"
    topk: float = 1.0
    block: int = wire.K
    residual: np.ndarray | None = field(default=None, repr=False)

    def encode(self, grad: np.ndarray) -> np.ndarray:
        if self.topk < 1.0:
            grad = self._top_blocks(grad)
        if self.dtype == "float32":
            return grad.astype(np.float32)
        c = clip_limit(self.workers)
        return np.rint(np.clip(grad, -c, c).astype(np.float64) * (1 << FRACTION_BITS)).astype(np.int32)

    def decode_mean(self, total: np.ndarray) -> np.ndarray:
        scale = 1.0 if self.dtype == "float32" else float(1 << FRACTION_BITS)
        return (np.asarray(total, dtype=np.float64) / (scale * self.workers)).astype(np.float32)

    def _top_blocks(self, grad: np.ndarray) -> np.ndarray:
        acc = grad.astype(np.float32) + (self.residual if self.residual is not None else 0)
        nb = -(-acc.size // self.block)
        padded = np.zeros(nb * self.block, np.float32)
        padded[:acc.size] = acc
        norms = np.linalg.norm(padded.reshape(nb, self.block), axis=1)
        keep = max(1, int(round(self.topk * nb)))
        mask = np.zeros(nb, bool)
        mask[np.argsort(-norms, kind="stable")[:keep]] = True
        sent = (padded.reshape(nb, self.block) * mask[:, None]).ravel()[:acc.size]
        self.residual = acc - sent
        return sent


def minibatch(cfg: Config, n_shard: int, step: int, rank: int) -> np.ndarray:
    """Indices into rank's shard for one step: the same in every process."""
    return np.random.default_rng([cfg.seed, step, rank]).choice(n_shard, size=min(cfg.batch, n_shard),
                                                                replace=False)


def train(cfg: Config, ranks: list[int], reduce, on_step=None) -> dict:
    """Train; `ranks` are the ranks whose gradients this process computes (one in a worker,
    all in the reference); reduce(list of encoded gradients) -> their sum over all ranks."""
    xtr, ytr, xte, yte = load_digits_split(cfg.seed)
    model = MLP(xtr.shape[1], cfg.hidden, 10, cfg.seed)
    shards = {r: np.arange(r, len(ytr), cfg.workers) for r in ranks}
    codecs = {r: Encoding(cfg.workers, cfg.dtype, cfg.topk) for r in ranks}
    curve = [{"step": 0, "train_loss": model.evaluate(xtr, ytr)[0], "test_accuracy": model.evaluate(xte, yte)[1]}]
    for step in range(cfg.steps):
        encoded = []
        for r in ranks:
            idx = shards[r][minibatch(cfg, len(shards[r]), step, r)]
            _, grad = model.loss_and_gradient(xtr[idx], ytr[idx])
            encoded.append(codecs[r].encode(grad))
        total = reduce(encoded)
        model.params = (model.params - np.float32(cfg.lr) * codecs[ranks[0]].decode_mean(total)).astype(np.float32)
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            loss, _ = model.evaluate(xtr, ytr)
            _, acc = model.evaluate(xte, yte)
            curve.append({"step": step + 1, "train_loss": loss, "test_accuracy": acc})
        if on_step:
            on_step(step + 1, total)
    return {"params": model.params, "curve": curve, "final_accuracy": curve[-1]["test_accuracy"]}


def train_single_process(cfg: Config) -> dict:
    """The reference: every rank's shard in this process, summed exactly (int32 wrap-around
    like the switch, float32 in float64)."""
    def reduce(encoded):
        acc = np.zeros(encoded[0].shape, np.int32 if cfg.dtype == "int32" else np.float64)
        for e in encoded:
            acc += e
        return acc
    return train(cfg, list(range(cfg.workers)), reduce)
