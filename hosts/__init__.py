"""Host side of agglab: the aggregation packet layer, quantisation and the worker agent.

`protocol` describes the packet (scapy layer for inspection and tests, plain
struct/numpy helpers for the data path), `quantization` turns float32 blocks
into int32 the switch can add, and `agent` runs the SwitchML worker protocol
(`allreduce`) over any `Transport`.
"""
