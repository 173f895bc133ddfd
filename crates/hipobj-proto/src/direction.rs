//! Which way a transfer moves bytes: the one type both protocols, the
//! client and the server use.

use std::fmt;

/// Which way a transfer moves an object's bytes, seen from the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the object into the client's buffer: the server RDMA WRITEs
    /// them (in both protocols).
    Get,
    /// From the client's buffer into the object: the server RDMA READs
    /// them (the binding protocol), or the client RDMA WRITEs them into the
    /// server's staging buffer (hipobj-rc-v2).
    Put,
}

impl Direction {
    /// `GET` or `PUT`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Get => "GET",
            Direction::Put => "PUT",
        }
    }

    /// Parses exactly `GET` or `PUT` (uppercase only).
    pub fn parse(value: &[u8]) -> Option<Direction> {
        match value {
            b"GET" => Some(Direction::Get),
            b"PUT" => Some(Direction::Put),
            _ => None,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
