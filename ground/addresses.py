"""Addresses of emulated hosts and of the aggregation service.

Workers send aggregation packets to one virtual service address that no host owns;
the first switch on the path intercepts them by UDP port. A static ARP entry on every
host points SERVICE_IP at SERVICE_MAC, so no ARP ever has to be answered for it.
All addresses are inside 10.0.0.0/8 on interfaces of namespaces this project creates.
Pure functions of a host's index: the data plane, hosts and controller agree on them.
"""

from __future__ import annotations

SERVICE_IP = "10.255.255.254"
SERVICE_MAC = "02:a6:67:ff:ff:fe"
PREFIX_LEN = 8


def host_ip(index: int) -> str:
    """IP of the index-th host (1-based): 10.0.0.1 ... 10.0.0.250, 10.0.1.1, ..."""
    return f"10.0.{(index - 1) // 250}.{(index - 1) % 250 + 1}"


def host_mac(index: int) -> str:
    return f"02:00:00:00:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}"


def nic_ip(index: int, nic: int) -> str:
    """IP of NIC `nic` of the index-th host; NIC 0 is host_ip(index). All in 10.0.0.0/8."""
    return host_ip(index) if nic == 0 else f"10.{32 * nic + (index - 1) // 250}.0.{(index - 1) % 250 + 1}"


def nic_mac(index: int, nic: int) -> str:
    return f"02:00:00:{nic:02x}:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}"

