"""agglab: packet-level emulator for in-network aggregation (SwitchML/OmniReduce style).

This package is the program (layer 4): the command-line interface, the lab, the teaching
exercises, calibration and benchmarks. The shared pieces it builds on live below it: the wire
format and paths in ground/, the switches in softswitch/, the hosts' agents in hosts/, the
controller in controller/, the Mininet network and sessions in emulation/.
"""

__version__ = "0.1.0"
