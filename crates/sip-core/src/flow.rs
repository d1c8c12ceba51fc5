use crate::via::Transport;
use std::net::SocketAddr;

/// Where a message came from or goes to: a transport, the local listener, and for connection
/// transports the connection (0 = none yet: open or reuse one to `remote`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    pub transport: Transport,
    pub listener: u16,
    pub connection: u64,
    pub remote: SocketAddr,
}

impl Flow {
    pub fn is_reliable(&self) -> bool {
        self.transport.is_reliable()
    }
}
