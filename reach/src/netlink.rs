//! Asking the kernel over netlink, in the namespace of the calling thread: one dump request
//! (addresses, routes, links, sockets), every answer collected until the kernel says done.
//! Callers run it inside `--netns` through [`crate::netns::within`], so a socket opened here
//! belongs to that namespace.

use std::io;

use netlink_packet_core::{
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_sys::{Socket, SocketAddr};

/// Sends `request` as a dump on a `protocol` netlink socket (`NETLINK_ROUTE`,
/// `NETLINK_SOCK_DIAG`) and returns every message of the answer.
pub(crate) fn dump<M>(protocol: isize, request: M) -> io::Result<Vec<M>>
where
    M: NetlinkSerializable + NetlinkDeserializable + std::fmt::Debug,
{
    let mut socket = Socket::new(protocol)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let mut out = Vec::new();
    let mut receive = vec![0u8; 1 << 16];
    loop {
        let size = socket.recv(&mut &mut receive[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let message = NetlinkMessage::<M>::deserialize(&receive[offset..size])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => {
                    return Err(e
                        .code
                        .map(|c| io::Error::from_raw_os_error(-c.get()))
                        .unwrap_or_else(|| io::Error::other("netlink error")))
                }
                NetlinkPayload::InnerMessage(m) => out.push(m),
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}
