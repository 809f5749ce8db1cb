"""Jobs that train, on the session's side: the compute per iteration a PACE profile gives
(`--compute-profile`), and how long a training run may take before its workers are killed.

Why the profile is scaled: the emulator shrinks both the link (--bw) and the gradient
(--elements), so a real model's compute milliseconds would dwarf or vanish beside the
emulated transfer. What ATP's idle aggregators depend on is the ratio of compute to
communication, so the compute slept is the profile's forward + backward time times the
dilation (ground/scale.py: emulated seconds per real second) between the real network
(REAL_LINK_GBPS, the profile's whole gradient) and this run (--bw, --elements x 4 bytes).
"""

from __future__ import annotations

from dataclasses import replace

from agglab.ground.runspec import RunSpec
from agglab.ground.scale import Scale
from agglab.pace.schedule import load_profile

REAL_LINK_GBPS = 100.0        # ATP's testbed links (NSDI'21: 100 Gb/s), the real side of the scale


def profile_compute_ms(name: str, bw_mbps: float, elements: int, link_gbps: float = REAL_LINK_GBPS) -> float:
    """Emulated compute per iteration (ms) of PACE profile `name`: its forward + backward
    time, dilated as the transfer of its gradient (4 bytes a parameter) at link_gbps is
    when it becomes `elements` int32/float32 values at bw_mbps."""
    profile = load_profile(name)
    real_bytes = sum(layer.nbytes for layer in profile.layers)
    scale = Scale(rate=link_gbps * 1e3 / bw_mbps, size=real_bytes / (elements * 4))
    return (profile.forward_ms + profile.backward_ms) * scale.dilation


def resolve_compute(spec: RunSpec) -> RunSpec:
    """The spec the workers get: a --compute-profile turned into its compute_ms."""
    if spec.compute_profile is None:
        return spec
    ms = profile_compute_ms(spec.compute_profile, spec.bw, spec.elements)
    return replace(spec, compute_ms=round(ms, 3), compute_profile=None)


def extra_seconds(spec: RunSpec) -> float:
    """What training adds to a run's deadline beyond one allreduce: the latest start, every
    iteration's compute, and the allreduces after the first (each as long as the first's
    allowance, `per_call`)."""
    return max((spec.offset_of(j) for j in range(spec.jobs)), default=0.0) + spec.iterations * (spec.compute_ms or 0.0) / 1e3


def per_call_allowance(spec: RunSpec, workers_elements: float) -> float:
    """The deadline's allowance for the allreduces: the one-call allowance the launcher
    gives (elements x workers / 50,000 s), times the iterations."""
    return spec.iterations * workers_elements / 50_000
