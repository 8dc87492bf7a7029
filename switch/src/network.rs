//! The private network's pre-check, part of observing: its declared range and the node's
//! address in it are checked against every address and route in the node's namespace — a
//! predecessor's tunnel, a container runtime's bridges, the uplink — at genesis and by a switch
//! that changes the range. An overlap is refused (like a taken port) naming the interface and
//! its range: two networks answering for the same addresses would send the mesh's traffic
//! down the predecessor's tunnel, or the predecessor's down the mesh's.
//!
//! Changes nothing; no crash point. The dry run refuses alike.

use mesh_lib::model::PrivateNetwork;

use crate::ActivateError;
use crate::Activator;

impl Activator {
    /// The addresses and routes of the node's namespace.
    pub fn interfaces(&self) -> Result<mesh_reach::interfaces::Interfaces, ActivateError> {
        Ok(mesh_reach::interfaces::read(self.firewall.netns())?)
    }

    /// Refuses `wanted` when its range or address collides with anything on the node but the
    /// private network's own interface — the one carrying `wanted`'s address, or `in_force`'s
    /// (the hub as it is up now), with its declared range.
    pub fn check_private_network(
        &self,
        wanted: &PrivateNetwork,
        in_force: Option<&PrivateNetwork>,
    ) -> Result<(), ActivateError> {
        let net = self.interfaces()?;
        let own: Vec<(ipnet::IpNet, std::net::IpAddr)> = [Some(wanted), in_force]
            .into_iter()
            .flatten()
            .map(|p| (ipnet::IpNet::V4(p.range), std::net::IpAddr::V4(p.address)))
            .collect();
        let own = net.private_interfaces(&own);
        let collisions = net.collisions(
            ipnet::IpNet::V4(wanted.range),
            std::net::IpAddr::V4(wanted.address),
            &own,
        );
        if collisions.is_empty() {
            return Ok(());
        }
        Err(ActivateError::PrivateNetwork {
            range: wanted.range,
            address: wanted.address,
            collisions,
        })
    }
}
