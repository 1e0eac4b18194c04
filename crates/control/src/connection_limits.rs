//! [`ConnectionLimits`]: how many connections a server serves at once, overall and per peer
//! (a uid on the control socket, an IP address on the metrics endpoint).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts open connections; [`try_open`](Self::try_open) hands out a [`ConnectionSlot`] while
/// both limits allow, and the slot gives its place back when dropped.
#[derive(Debug)]
pub struct ConnectionLimits<K: Eq + Hash> {
    max_total: usize,
    max_per_peer: usize,
    open: Arc<Mutex<OpenConnections<K>>>,
}

#[derive(Debug)]
struct OpenConnections<K> {
    total: usize,
    per_peer: HashMap<K, usize>,
}

/// One open connection of `peer`, counted until dropped.
#[derive(Debug)]
pub struct ConnectionSlot<K: Eq + Hash> {
    peer: K,
    open: Arc<Mutex<OpenConnections<K>>>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_total` connections are open.
    Full {
        /// The overall limit.
        max_total: usize,
    },
    /// This peer has `max_per_peer` connections open.
    PeerFull {
        /// The per-peer limit.
        max_per_peer: usize,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full { max_total } => write!(f, "{max_total} connections already open"),
            Self::PeerFull { max_per_peer } => {
                write!(f, "{max_per_peer} connections of this peer already open")
            }
        }
    }
}

impl<K: Eq + Hash + Clone> ConnectionLimits<K> {
    /// At most `max_total` connections, and at most `max_per_peer` of one peer.
    pub fn new(max_total: usize, max_per_peer: usize) -> Self {
        Self {
            max_total,
            max_per_peer,
            open: Arc::new(Mutex::new(OpenConnections {
                total: 0,
                per_peer: HashMap::new(),
            })),
        }
    }

    /// A slot for one more connection of `peer`, or why not.
    pub fn try_open(&self, peer: K) -> Result<ConnectionSlot<K>, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.max_total {
            return Err(Refusal::Full {
                max_total: self.max_total,
            });
        }
        let of_peer = open.per_peer.entry(peer.clone()).or_insert(0);
        if *of_peer >= self.max_per_peer {
            return Err(Refusal::PeerFull {
                max_per_peer: self.max_per_peer,
            });
        }
        *of_peer += 1;
        open.total += 1;
        Ok(ConnectionSlot {
            peer,
            open: self.open.clone(),
        })
    }
}

impl<K: Eq + Hash> Drop for ConnectionSlot<K> {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.per_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_total_and_per_peer_and_frees_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let a1 = limits.try_open(1).unwrap();
        let _a2 = limits.try_open(1).unwrap();
        assert_eq!(
            limits.try_open(1).unwrap_err(),
            Refusal::PeerFull { max_per_peer: 2 }
        );
        let _b1 = limits.try_open(2).unwrap();
        assert_eq!(
            limits.try_open(3).unwrap_err(),
            Refusal::Full { max_total: 3 }
        );
        drop(a1);
        let _a3 = limits.try_open(1).unwrap();
        assert!(limits.try_open(2).is_err());
        assert!(limits.open.lock().unwrap().per_peer.len() == 2);
    }
}
