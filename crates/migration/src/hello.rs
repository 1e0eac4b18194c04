//! The first record each side sends: protocol version, role and a fresh nonce.

use crate::migration_error::MigrationError;
use crate::role::Role;

/// The protocol version this crate speaks. Both ends must speak the same one.
pub const PROTOCOL_VERSION: u32 = 5;
/// The first bytes of a hello.
pub const HELLO_MAGIC: [u8; 8] = *b"MVMIGRAT";
/// Bytes in a hello's nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes in a hello: magic (8), version (u32 LE), role (1: source, 2: destination), nonce (32).
pub const HELLO_LEN: usize = HELLO_MAGIC.len() + 4 + 1 + NONCE_LEN;

/// The first record each side sends, unauthenticated (the proofs that follow cover it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender's [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The sender's role.
    pub role: Role,
    /// Fresh random bytes; both nonces go into the session keys, so every connection has its
    /// own keys and frames from another connection never verify.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// Our hello for `role`, with a fresh random nonce.
    pub fn new(role: Role) -> Result<Hello, MigrationError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|error| MigrationError::Random(error.to_string()))?;
        Ok(Hello {
            version: PROTOCOL_VERSION,
            role,
            nonce,
        })
    }

    /// The hello's wire bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut bytes = [0u8; HELLO_LEN];
        bytes[..8].copy_from_slice(&HELLO_MAGIC);
        bytes[8..12].copy_from_slice(&self.version.to_le_bytes());
        bytes[12] = self.role.to_byte();
        bytes[13..].copy_from_slice(&self.nonce);
        bytes
    }

    /// Parses a peer's hello: exactly [`HELLO_LEN`] bytes, the magic, our
    /// [`PROTOCOL_VERSION`] ([`MigrationError::Version`] otherwise), and a known role.
    pub fn parse(bytes: &[u8]) -> Result<Hello, MigrationError> {
        let not_peer = |problem: String| MigrationError::NotMigrationPeer { problem };
        let Ok(bytes) = <&[u8; HELLO_LEN]>::try_from(bytes) else {
            return Err(not_peer(format!(
                "its hello is {} bytes long, expected {HELLO_LEN}",
                bytes.len()
            )));
        };
        if bytes[..8] != HELLO_MAGIC {
            return Err(not_peer(format!(
                "its hello starts with {:02x?}, expected the magic {:?}",
                &bytes[..8],
                String::from_utf8_lossy(&HELLO_MAGIC)
            )));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != PROTOCOL_VERSION {
            return Err(MigrationError::Version {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        let role = Role::from_byte(bytes[12]).ok_or_else(|| {
            not_peer(format!(
                "its hello has role byte {:#04x} at byte offset 12, expected 1 (source) or 2 \
                 (destination)",
                bytes[12]
            ))
        })?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&bytes[13..]);
        Ok(Hello {
            version,
            role,
            nonce,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_fresh_nonces() {
        let first = Hello::new(Role::Source).unwrap();
        let second = Hello::new(Role::Source).unwrap();
        assert_ne!(first.nonce, second.nonce);
        assert_eq!(Hello::parse(&first.encode()).unwrap(), first);
        let destination = Hello::new(Role::Destination).unwrap();
        assert_eq!(Hello::parse(&destination.encode()).unwrap(), destination);
    }

    #[test]
    fn refuses_bad_hellos() {
        let good = Hello::new(Role::Source).unwrap().encode();
        assert!(matches!(
            Hello::parse(&good[..44]),
            Err(MigrationError::NotMigrationPeer { .. })
        ));
        let mut bad = good;
        bad[0] = b'G';
        let error = Hello::parse(&bad).unwrap_err().to_string();
        assert!(error.contains("expected the magic \"MVMIGRAT\""), "{error}");
        let mut bad = good;
        // A version 4 peer (no post-copy recovery) is refused by name.
        bad[8..12].copy_from_slice(&4u32.to_le_bytes());
        let error = Hello::parse(&bad).unwrap_err();
        assert!(
            matches!(error, MigrationError::Version { ours: 5, theirs: 4 }),
            "{error}"
        );
        let mut bad = good;
        bad[12] = 7;
        let error = Hello::parse(&bad).unwrap_err().to_string();
        assert!(error.contains("role byte 0x07"), "{error}");
    }
}
