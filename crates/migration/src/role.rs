//! Which end of the migration stream a side is.

use std::fmt;

/// Which end of the migration stream a side is. The source (the QEMU process being migrated
/// away from) connects and sends memory; the destination accepts and receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The sending side: connects, speaks first, sends `Begin`, `Pages`, `Zero`, `RoundEnd`,
    /// `Finish`.
    Source,
    /// The receiving side: accepts, answers `Ready` and `Done`.
    Destination,
}

impl Role {
    /// The role's byte in a hello.
    pub(crate) const fn to_byte(self) -> u8 {
        match self {
            Role::Source => 1,
            Role::Destination => 2,
        }
    }

    /// The role a hello byte names, if any.
    pub(crate) const fn from_byte(byte: u8) -> Option<Role> {
        match byte {
            1 => Some(Role::Source),
            2 => Some(Role::Destination),
            _ => None,
        }
    }

    /// The other end's role.
    pub const fn peer(self) -> Role {
        match self {
            Role::Source => Role::Destination,
            Role::Destination => Role::Source,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Source => "source",
            Role::Destination => "destination",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_round_trip_and_peer() {
        for role in [Role::Source, Role::Destination] {
            assert_eq!(Role::from_byte(role.to_byte()), Some(role));
            assert_eq!(role.peer().peer(), role);
            assert_ne!(role.peer(), role);
        }
        assert_eq!(Role::from_byte(0), None);
        assert_eq!(Role::from_byte(3), None);
        assert_eq!(Role::Source.to_string(), "source");
    }
}
