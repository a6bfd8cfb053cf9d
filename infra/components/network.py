"""OverlayNetwork: the attachable overlay the training tasks talk over."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from infra.components.swarm import SwarmCluster
from infra.config import Network

MTU_OPTION = "com.docker.network.driver.mtu"
VXLAN_OPTION = "com.docker.network.driver.overlay.vxlanid_list"


# Docker's overlay driver takes VNIs up to 2^24 - 1 and hands them out itself from
# 4097 upwards; one asked for explicitly is reserved by the same allocator.
VNI_FLOOR, VNI_END = 1 << 20, (1 << 24) - 1


@dataclass(frozen=True)
class OverlayNetworkArgs:
    """The network config and the swarm it is created on."""

    network: Network
    swarm: SwarmCluster


def vxlan_id(net: Network, salt: str) -> int:
    """The overlay's VNI, fixed by everything that makes the network what it is.

    Why explicit: Docker writes the VNI it picked into the network's options, the
    provider diffs options against the program's and every network field forces
    replacement, so a network created without one is replaced by the very next
    `up` (and every service and the launch with it). Derived from the properties
    that force replacement (and the stack, `salt`), it stays the same across
    no-op runs and changes with a replacement, so the new network never asks for
    the VNI the old one still holds while both exist (create before delete). The
    high range keeps clear of the VNIs Docker allocates itself.
    """
    ident = f"{salt}/{net.name}/{net.mtu}/{net.encrypted}/{net.subnet}/{net.attachable}"
    digest = int(hashlib.sha256(ident.encode()).hexdigest(), 16)
    return VNI_FLOOR + digest % (VNI_END - VNI_FLOOR)


def network_name(net: Network, salt: str) -> str:
    """`<name>-<6 hex>`, the suffix naming the same identity as the VNI.

    Why not the bare name: a replacement (an MTU change) must create the new
    network before deleting the old one, because Docker refuses to delete a
    network that services still use; two networks cannot share a name.
    """
    return f"{net.name}-{vxlan_id(net, salt):06x}"


def network_options(net: Network, salt: str) -> dict[str, str]:
    """Driver options: the MTU and the VNI always, IPsec only when asked (MTU and CPU)."""
    opts = {MTU_OPTION: str(net.mtu), VXLAN_OPTION: str(vxlan_id(net, salt))}
    if net.encrypted:
        opts["encrypted"] = "true"
    return opts


def ipam(net: Network) -> list[docker.NetworkIpamConfigArgs] | None:
    """An explicit subnet with the gateway Docker would pick (its first address),
    stated so that what the provider reads back equals what the program asks for."""
    if not net.subnet:
        return None
    gateway = str(next(ipaddress.ip_network(net.subnet, strict=False).hosts()))
    return [docker.NetworkIpamConfigArgs(subnet=net.subnet, gateway=gateway)]


class OverlayNetwork(pulumi.ComponentResource):
    """A swarm-scoped overlay network with an explicit MTU."""

    network: docker.Network
    network_id: pulumi.Output[str]
    """Reference the network by id, never by name: every field of it forces replacement."""
    network_name: pulumi.Output[str]
    """`<name>-<6 hex>` (see network_name): what `docker run --network` takes."""
    mtu: int

    def __init__(
        self,
        name: str,
        args: OverlayNetworkArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:network:OverlayNetwork", name, None, opts)
        net = args.network
        salt = f"{pulumi.get_project()}/{pulumi.get_stack()}"
        self.network = docker.Network(
            f"{name}-overlay",
            name=network_name(net, salt),
            driver="overlay",
            attachable=net.attachable,
            options=network_options(net, salt),
            ipam_configs=ipam(net),
            labels=[docker.NetworkLabelArgs(label="dss.managed-by", value="pulumi")],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.swarm.manager_provider,
                depends_on=args.swarm.members,
                # Docker fills in IPAM (subnet, gateway) when none was asked for;
                # the provider's Read writes it back, and every field forces
                # replacement, so a refresh would otherwise propose replacing a
                # healthy network. (The VNI is explicit instead: see vxlan_id.)
                ignore_changes=[] if net.subnet else ["ipamConfigs"],
                # The bridged provider asks for delete-first whenever a name is set;
                # Docker refuses that while services use the network. The name
                # changes with every replacement (network_name), so both can coexist.
                delete_before_replace=False,
            ),
        )
        self.network_id = self.network.id
        self.network_name = self.network.name
        self.mtu = net.mtu
        self.register_outputs(
            {"network_id": self.network_id, "network_name": self.network_name, "mtu": self.mtu}
        )
