"""BML in-network variant on one BCube server: L parts, one NIC (= level) each per stage.

Part j is allreduced at stage s through the level-((j+s) mod L) switch of this server's
group; after L stages every part holds the global sum. One thread per NIC serves the
parts in the order the schedule gives that NIC ((l - s) mod L at stage s) and waits for a
part's previous stage, so no NIC carries two parts at once and each socket is used by
one thread only.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ground import wire
from hosts.agent import allreduce
from hosts.transport import UdpTransport


def allreduce_bml(array: np.ndarray, plan: dict, service_ip: str, give_up: float = 10.0,
                  link_mbps: float | None = None):
    """Sum `array` over the plan's BCube servers; `link_mbps`, the rate of this server's
    slowest NIC, paces every NIC's agent (hosts/transport.py `pace`)."""
    levels, n = plan["levels"], plan["n"]
    parts = [p.copy() for p in np.array_split(np.asarray(array), levels)]
    done = [threading.Event() for _ in range(levels * levels)]       # (part, stage) finished
    errors: list[BaseException] = []
    totals = {"packets_sent": 0, "retransmissions": 0, "duplicates_ignored": 0}
    lock = threading.Lock()
    started = time.monotonic()

    nics = {int(k): v for k, v in plan["nics"].items()}             # JSON keys are strings
    ranks = {int(k): v for k, v in plan["rank_in_group"].items()}

    def nic(level: int) -> None:
        info, rank = nics[level], ranks[level]
        transport = UdpTransport(info["ip"], service_ip, device=info["dev"])
        try:
            for stage in range(levels):
                part = (level - stage) % levels
                if stage and not done[part * levels + stage - 1].wait(give_up * levels * 2):
                    raise TimeoutError(f"part {part} never finished stage {stage - 1}")
                if errors:
                    return
                window = max(1, min(plan["window"], -(-len(parts[part]) // wire.K)))
                parts[part], stats = allreduce(parts[part], transport=transport, rank=rank, workers=n,
                                               tree=part, window=window, give_up=give_up, return_stats=True,
                                               link_mbps=link_mbps)
                with lock:
                    for key in totals:
                        totals[key] += getattr(stats, key)
                done[part * levels + stage].set()
        except BaseException as exc:          # reported by the caller, with the others released
            errors.append(exc)
            for event in done:
                event.set()
        finally:
            transport.close()

    threads = [threading.Thread(target=nic, args=(l,), daemon=True) for l in range(levels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    totals["seconds"] = time.monotonic() - started
    return np.concatenate(parts), totals
