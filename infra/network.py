"""OverlayNetwork: the attachable overlay the training tasks talk over."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_docker as docker

from infra.config import Network

MTU_OPTION = "com.docker.network.driver.mtu"


def network_options(net: Network) -> dict[str, str]:
    """Driver options: the MTU always, IPsec only when asked (it costs MTU and CPU)."""
    opts = {MTU_OPTION: str(net.mtu)}
    if net.encrypted:
        opts["encrypted"] = "true"
    return opts


class OverlayNetwork(pulumi.ComponentResource):
    """A swarm-scoped overlay network with an explicit MTU."""

    network: docker.Network
    network_id: pulumi.Output[str]
    """Reference the network by id, never by name: every field of it forces replacement."""
    mtu: int

    def __init__(
        self,
        name: str,
        net: Network,
        provider: docker.Provider,
        depends_on: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("deepspeed-swarm:network:OverlayNetwork", name, None, opts)
        ipam = [docker.NetworkIpamConfigArgs(subnet=net.subnet)] if net.subnet else None
        self.network = docker.Network(
            f"{name}-overlay",
            name=net.name,
            driver="overlay",
            attachable=net.attachable,
            options=network_options(net),
            ipam_configs=ipam,
            labels=[docker.NetworkLabelArgs(label="dss.managed-by", value="pulumi")],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                depends_on=list(depends_on),
                # Docker fills in IPAM (subnet, gateway) and the overlay's
                # vxlanid_list when none was asked for; the provider's Read writes
                # them back, and every field forces replacement, so a refresh would
                # otherwise propose replacing a healthy network.
                ignore_changes=[] if net.subnet else ["ipamConfigs"],
            ),
        )
        self.network_id = self.network.id
        self.mtu = net.mtu
        self.register_outputs({"network_id": self.network_id, "mtu": self.mtu})
