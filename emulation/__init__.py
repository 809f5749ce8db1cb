"""Emulated network layer: Mininet builder, switch nodes, P4 build, link monitor,
failure injection and the session that runs one job on them. Imports ground, the data
plane, hosts and controller; imported by the program (agglab CLI, lab) and experiments.
"""
