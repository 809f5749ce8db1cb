"""Running agglab on more than one machine, on Mininet's cluster edition.

`ground/cluster_file.py` reads a cluster file (the servers, how to reach them over ssh); `practice.py`
builds a cluster of namespaced "servers" on this one machine to try cluster mode on;
`nodes.py`, `links.py` and `network.py` place a network's switches and hosts on the servers
(Mininet's `RemoteMixin` and its placers) and join them with VXLAN tunnels; `bmv2.py` is
what BMv2's simple_switch needs there.
"""
