//! The mutual authentication at the start of a connection.
//!
//! 1. Both sides send their [`Hello`] at once (so two destinations cannot wait on each other)
//!    and read the peer's: magic, version and roles must fit.
//! 2. Both derive the [`SessionKeys`] from the shared key and both nonces.
//! 3. The source sends its proof. The destination checks it (constant time) before answering:
//!    with its own proof if it matches, with [`REFUSAL`] if not, so a source with the wrong key
//!    learns only that it failed. The source checks the destination's proof, so it never sends
//!    memory to a destination that does not hold the key.

use std::io::{Read, Write};

use crate::hello::{Hello, HELLO_LEN};
use crate::migration_error::MigrationError;
use crate::migration_key::MigrationKey;
use crate::role::Role;
use crate::session_keys::{SessionKeys, MAC_LEN};
use crate::wire_io::{read_record, write_record};

/// What a destination sends instead of its proof when the source's proof is wrong. It is not
/// authenticated (nothing can be, without the key); the source treats any proof that does not
/// verify as [`MigrationError::KeyMismatch`], this one included.
pub(crate) const REFUSAL: [u8; MAC_LEN] = *b"memvisor-migration:key-refused!!";

/// Runs the handshake as `role` over `stream`, counting wire bytes; returns the connection's
/// keys.
pub(crate) fn authenticate<S: Read + Write>(
    stream: &mut S,
    key: &MigrationKey,
    role: Role,
    bytes_sent: &mut u64,
    bytes_received: &mut u64,
) -> Result<SessionKeys, MigrationError> {
    let ours = Hello::new(role)?;
    let our_bytes = ours.encode();
    write_record(stream, &our_bytes, bytes_sent, &|| {
        format!("our handshake hello (as the {role})")
    })?;
    let mut peer_bytes = [0u8; HELLO_LEN];
    read_record(stream, &mut peer_bytes, bytes_received, &|| {
        format!("the {}'s handshake hello", role.peer())
    })?;
    let peer = Hello::parse(&peer_bytes)?;
    if peer.role == role {
        return Err(MigrationError::RoleClash { role });
    }
    let (source, destination) = match role {
        Role::Source => ((&ours, &our_bytes), (&peer, &peer_bytes)),
        Role::Destination => ((&peer, &peer_bytes), (&ours, &our_bytes)),
    };
    let keys = SessionKeys::derive(key, role, &source.0.nonce, &destination.0.nonce);
    let mut transcript = [0u8; 2 * HELLO_LEN];
    transcript[..HELLO_LEN].copy_from_slice(source.1);
    transcript[HELLO_LEN..].copy_from_slice(destination.1);

    let mut peer_proof = [0u8; MAC_LEN];
    match role {
        Role::Source => {
            write_record(stream, &keys.our_proof(&transcript), bytes_sent, &|| {
                "our handshake proof (as the source)".into()
            })?;
            read_record(stream, &mut peer_proof, bytes_received, &|| {
                "the destination's handshake proof (a destination closes the stream when our \
                 proof is wrong)"
                    .into()
            })?;
            if !keys.peer_proof_matches(&transcript, &peer_proof) {
                return Err(MigrationError::KeyMismatch);
            }
        }
        Role::Destination => {
            read_record(stream, &mut peer_proof, bytes_received, &|| {
                "the source's handshake proof".into()
            })?;
            if !keys.peer_proof_matches(&transcript, &peer_proof) {
                // Best effort: tell the source why before closing; its own check fails anyway.
                let _ = write_record(stream, &REFUSAL, bytes_sent, &|| "our refusal".into());
                return Err(MigrationError::KeyMismatch);
            }
            write_record(stream, &keys.our_proof(&transcript), bytes_sent, &|| {
                "our handshake proof (as the destination)".into()
            })?;
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hello::PROTOCOL_VERSION;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::thread;

    fn key() -> MigrationKey {
        MigrationKey::from_bytes(&[42; 32]).unwrap()
    }

    fn run(
        stream: &mut UnixStream,
        key: &MigrationKey,
        role: Role,
    ) -> Result<SessionKeys, MigrationError> {
        let (mut sent, mut received) = (0, 0);
        authenticate(stream, key, role, &mut sent, &mut received)
    }

    fn both(
        first: Role,
        first_key: MigrationKey,
        second: Role,
        second_key: MigrationKey,
    ) -> (
        Result<SessionKeys, MigrationError>,
        Result<SessionKeys, MigrationError>,
    ) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let other = thread::spawn(move || run(&mut b, &second_key, second));
        let mine = run(&mut a, &first_key, first);
        drop(a);
        (mine, other.join().unwrap())
    }

    #[test]
    fn same_key_authenticates_both_ways() {
        let (source, destination) = both(Role::Source, key(), Role::Destination, key());
        let (source, destination) = (source.unwrap(), destination.unwrap());
        let tag = source.send_tag(0, &[b"frame"], b"data");
        assert!(destination.receive_tag_matches(0, &[b"fr", b"ame"], b"data", &tag));
    }

    #[test]
    fn different_keys_fail_on_both_sides() {
        let other = MigrationKey::from_bytes(&[43; 32]).unwrap();
        let (source, destination) = both(Role::Source, key(), Role::Destination, other);
        assert!(matches!(source, Err(MigrationError::KeyMismatch)));
        assert!(matches!(destination, Err(MigrationError::KeyMismatch)));
    }

    #[test]
    fn role_clashes_are_refused_without_hanging() {
        for role in [Role::Source, Role::Destination] {
            let (first, second) = both(role, key(), role, key());
            for result in [first, second] {
                let error = result.err().unwrap();
                assert!(matches!(error, MigrationError::RoleClash { role: r } if r == role));
                assert!(error
                    .to_string()
                    .contains(&format!("both ends of the migration stream are the {role}")));
            }
        }
    }

    #[test]
    fn version_mismatch_is_reported() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let peer = thread::spawn(move || {
            let mut hello = Hello::new(Role::Destination).unwrap().encode();
            hello[8..12].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
            theirs.write_all(&hello).unwrap();
            let mut sink = Vec::new();
            let _ = theirs.read_to_end(&mut sink);
        });
        let error = run(&mut ours, &key(), Role::Source).err().unwrap();
        drop(ours);
        peer.join().unwrap();
        assert!(
            matches!(error, MigrationError::Version { ours: 5, theirs: 6 }),
            "{error}"
        );
    }

    #[test]
    fn a_non_memvisor_peer_is_named() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let peer = thread::spawn(move || {
            theirs.write_all(&[b'x'; HELLO_LEN]).unwrap();
            let mut sink = Vec::new();
            let _ = theirs.read_to_end(&mut sink);
        });
        let error = run(&mut ours, &key(), Role::Destination).err().unwrap();
        drop(ours);
        peer.join().unwrap();
        assert!(error
            .to_string()
            .starts_with("the peer is not a memvisor migration endpoint"));
    }

    #[test]
    fn destination_refuses_before_proving_itself() {
        // A source with the wrong key gets the fixed refusal, not the destination's proof.
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        let destination = thread::spawn(move || run(&mut theirs, &key(), Role::Destination));
        let hello = Hello::new(Role::Source).unwrap();
        ours.write_all(&hello.encode()).unwrap();
        let mut peer_hello = [0u8; HELLO_LEN];
        ours.read_exact(&mut peer_hello).unwrap();
        ours.write_all(&[0u8; MAC_LEN]).unwrap();
        let mut answer = Vec::new();
        ours.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, REFUSAL);
        assert!(matches!(
            destination.join().unwrap(),
            Err(MigrationError::KeyMismatch)
        ));
    }

    #[test]
    fn a_peer_closing_during_the_handshake_is_named() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(&[b'M'; 10]).unwrap();
        theirs.shutdown(std::net::Shutdown::Write).unwrap();
        let error = run(&mut ours, &key(), Role::Destination)
            .err()
            .unwrap()
            .to_string();
        drop(theirs);
        assert!(
            error.contains("after 10 of 45 bytes of the source's handshake hello"),
            "{error}"
        );
    }
}
