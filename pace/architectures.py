"""Layer lists of ResNet-50, VGG-16 and BERT-base derived from their architectures.

Why derive instead of copying a table: every parameter count then follows from the
published architecture (shapes below), and the totals can be checked against the
published totals (tests/test_pace.py, test_profiles_match_the_published_parameter_counts). Forward time per layer is a stated
formula, not a measurement: forward FLOPs x batch / an effective device throughput;
backward = 2 x forward (gradients w.r.t. inputs and weights each cost about one forward,
Kaplan et al. 2020, "Scaling laws", section 2.1). BatchNorm, ReLU, pooling, softmax and
layer-norm FLOPs are left out (under 1% of the convolution/matmul FLOPs).

`python -m agglab.pace.architectures` rewrites pace/profiles/*.yaml from this file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

PROFILES = Path(__file__).resolve().parent / "profiles"

# Effective fp32 throughput assumed for every profile: NVIDIA V100 SXM2, 15.7 TFLOP/s peak
# fp32 (NVIDIA V100 datasheet), at ~75% utilisation for large convolutions/matmuls.
DEVICE = "NVIDIA V100 SXM2 fp32, 15.7 TFLOP/s peak (datasheet) x 0.75 utilisation assumed"
DEVICE_FLOPS = 15.7e12 * 0.75


@dataclass
class Layer:
    """One layer whose gradient is one tensor group: parameters and forward FLOPs per sample."""
    name: str
    params: int
    flops: float        # forward FLOPs per sample (2 x multiply-accumulates)
    shape: str          # the architecture fact the numbers come from


def _conv(name, k, cin, cout, hw_out, bias=False, bn=True) -> Layer:
    params = k * k * cin * cout + (cout if bias else 0) + (2 * cout if bn else 0)
    return Layer(name, params, 2.0 * k * k * cin * cout * hw_out * hw_out,
                 f"conv {k}x{k} {cin}->{cout}, out {hw_out}x{hw_out}" + (" +bias" if bias else "")
                 + (" +BN(gamma,beta)" if bn else ""))


def _fc(name, cin, cout, per_sample_rows=1) -> Layer:
    return Layer(name, cin * cout + cout, 2.0 * cin * cout * per_sample_rows, f"fc {cin}->{cout} +bias")


def resnet50() -> list[Layer]:
    """He et al. 2016, Table 1 (50-layer), torchvision v1.5 layout (stride on the 3x3 conv).
    Published total: 25,557,032 parameters (torchvision model card)."""
    layers = [_conv("conv1", 7, 3, 64, 112)]
    cin, hw = 64, 56
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=2):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 2 else 1
            out_hw = hw // stride
            p = f"layer{stage - 1}.{b}"
            layers += [_conv(f"{p}.conv1", 1, cin, width, hw),
                       _conv(f"{p}.conv2", 3, width, width, out_hw),
                       _conv(f"{p}.conv3", 1, width, 4 * width, out_hw)]
            if b == 0:
                layers.append(_conv(f"{p}.downsample", 1, cin, 4 * width, out_hw))
            cin, hw = 4 * width, out_hw
    layers.append(_fc("fc", 2048, 1000))
    return layers


def vgg16() -> list[Layer]:
    """Simonyan & Zisserman 2015, configuration D (3x3 convs with bias, no BN), 224x224 input.
    Published total: 138,357,544 parameters (torchvision model card)."""
    plan = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, cin, hw, i = [], 3, 224, 0
    for v in plan:
        if v == "M":
            hw //= 2
            continue
        i += 1
        layers.append(_conv(f"conv{i}", 3, cin, v, hw, bias=True, bn=False))
        cin = v
    return layers + [_fc("fc6", 512 * 7 * 7, 4096), _fc("fc7", 4096, 4096), _fc("fc8", 4096, 1000)]


BERT_SEQ = 128


def bert_base(seq: int = BERT_SEQ) -> list[Layer]:
    """Devlin et al. 2019, BERT-base: 12 blocks, hidden 768, FFN 3072, vocabulary 30,522,
    512 positions, 2 token types; one layer = embeddings, each block's attention (Q, K, V, O
    + LayerNorm) and FFN (two matmuls + LayerNorm), and the pooler. Published total:
    109,482,240 parameters (bert-base-uncased with pooler). FLOPs per sample of `seq` tokens:
    2 x params x seq for the matmuls, plus 4 x seq^2 x 768 for the attention scores and
    their weighted sum; the embedding lookup costs no FLOPs."""
    h, ffn = 768, 3072
    layers = [Layer("embeddings", 30522 * h + 512 * h + 2 * h + 2 * h, 0.0,
                    "word 30522x768 + position 512x768 + type 2x768 + LayerNorm 2x768")]
    for b in range(12):
        attn = 4 * (h * h + h) + 2 * h
        layers.append(Layer(f"block{b}.attention", attn, 2.0 * 4 * h * h * seq + 4.0 * seq * seq * h,
                            "Q,K,V,O 768x768 +bias, LayerNorm 2x768"))
        mlp = (h * ffn + ffn) + (ffn * h + h) + 2 * h
        layers.append(Layer(f"block{b}.ffn", mlp, 2.0 * 2 * h * ffn * seq,
                            "768x3072 +bias, 3072x768 +bias, LayerNorm 2x768"))
    layers.append(Layer("pooler", h * h + h, 2.0 * h * h, "768x768 +bias on the [CLS] token"))
    return layers


MODELS = {
    "resnet50": (resnet50, 32, 25_557_032, "ImageNet 224x224, batch 32 per worker"),
    "vgg16": (vgg16, 32, 138_357_544, "ImageNet 224x224, batch 32 per worker"),
    "bert-base": (bert_base, 8, 109_482_240, f"sequence length {BERT_SEQ}, batch 8 per worker"),
}


def profile_dict(model: str) -> dict:
    """The YAML profile of one model: every number with where it comes from."""
    build, batch, published, workload = MODELS[model]
    layers = build()
    ms = 1e3 * batch / DEVICE_FLOPS
    return {
        "model": model,
        "source": {
            "architecture": (build.__doc__ or "").split("\n")[0].strip(),
            "params": "derived per layer from the architecture shapes (pace/architectures.py); "
                      f"total {sum(x.params for x in layers):,} vs published {published:,}",
            "forward_ms": f"forward FLOPs per sample x batch {batch} / {DEVICE_FLOPS / 1e12:.3g} TFLOP/s ({DEVICE})",
            "backward_ms": "2 x forward_ms (input and weight gradients each cost about one forward)",
            "workload": workload,
        },
        "batch": batch,
        "published_params": published,
        "layers": [{"name": x.name, "params": x.params, "forward_ms": round(x.flops * ms, 6),
                    "backward_ms": round(2 * x.flops * ms, 6), "shape": x.shape} for x in layers],
    }


def write_profiles(directory: Path = PROFILES) -> list[Path]:
    paths = []
    for model in MODELS:
        path = directory / f"{model}.yaml"
        header = (f"# Layer profile of {model}: generated by `python -m agglab.pace.architectures`; edit the\n"
                  "# architecture there, not this file. Layers in forward order.\n")
        path.write_text(header + yaml.safe_dump(profile_dict(model), sort_keys=False, width=120))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_profiles():
        print(p)
