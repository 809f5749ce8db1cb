"""agglab: packet-level emulator for in-network aggregation (SwitchML/OmniReduce style).

Shared, dependency-light pieces live here: the wire format (read from the P4
sources), paths, and the command-line interface.
"""

__version__ = "0.1.0"
