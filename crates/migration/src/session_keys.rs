//! The per-connection, per-direction MAC keys, the handshake proofs and the frame tags.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::hello::NONCE_LEN;
use crate::migration_key::MigrationKey;
use crate::role::Role;

/// HMAC-SHA256.
type HmacSha256 = Hmac<Sha256>;

/// Bytes in a MAC (HMAC-SHA256).
pub(crate) const MAC_LEN: usize = 32;
/// Label of the source → destination key.
const SOURCE_TO_DESTINATION_LABEL: &[u8] = b"memvisor-migration v1 key source->destination";
/// Label of the destination → source key.
const DESTINATION_TO_SOURCE_LABEL: &[u8] = b"memvisor-migration v1 key destination->source";
/// Label of a handshake proof.
const PROOF_LABEL: &[u8] = b"proof";

/// The two MAC keys of one connection, seen from one side: `k_src_to_dst` and `k_dst_to_src`
/// are HMAC-SHA256(shared key, label || source nonce || destination nonce) with distinct
/// labels. Each is kept as a keyed HMAC state, cloned per MAC.
pub(crate) struct SessionKeys {
    send: HmacSha256,
    receive: HmacSha256,
}

impl SessionKeys {
    /// The keys for `role` on the connection whose hellos carried these nonces.
    pub(crate) fn derive(
        key: &MigrationKey,
        role: Role,
        source_nonce: &[u8; NONCE_LEN],
        destination_nonce: &[u8; NONCE_LEN],
    ) -> SessionKeys {
        let direction_key = |label: &[u8]| {
            let mut mac = keyed(key.secret());
            mac.update(label);
            mac.update(source_nonce);
            mac.update(destination_nonce);
            keyed(&mac.finalize().into_bytes())
        };
        let source_to_destination = direction_key(SOURCE_TO_DESTINATION_LABEL);
        let destination_to_source = direction_key(DESTINATION_TO_SOURCE_LABEL);
        match role {
            Role::Source => SessionKeys {
                send: source_to_destination,
                receive: destination_to_source,
            },
            Role::Destination => SessionKeys {
                send: destination_to_source,
                receive: source_to_destination,
            },
        }
    }

    /// Our proof: HMAC(send key, "proof" || transcript), the transcript being both hellos as
    /// sent, the source's first.
    pub(crate) fn our_proof(&self, transcript: &[u8]) -> [u8; MAC_LEN] {
        proof(&self.send, transcript)
    }

    /// Whether `proof` is the peer's proof for `transcript`, compared in constant time.
    pub(crate) fn peer_proof_matches(&self, transcript: &[u8], proof_bytes: &[u8]) -> bool {
        proof(&self.receive, transcript).ct_eq(proof_bytes).into()
    }

    /// The tag of the frame we send with `sequence`: HMAC(send key, sequence u64 LE || header
    /// || payload).
    pub(crate) fn send_tag(&self, sequence: u64, header_and_payload: &[u8]) -> [u8; MAC_LEN] {
        frame_tag(&self.send, sequence, header_and_payload)
    }

    /// Whether `tag` is right for the frame received with `sequence`, compared in constant
    /// time.
    pub(crate) fn receive_tag_matches(
        &self,
        sequence: u64,
        header: &[u8],
        payload: &[u8],
        tag: &[u8],
    ) -> bool {
        let mut mac = self.receive.clone();
        mac.update(&sequence.to_le_bytes());
        mac.update(header);
        mac.update(payload);
        let expected: [u8; MAC_LEN] = mac.finalize().into_bytes().into();
        expected.ct_eq(tag).into()
    }
}

/// An HMAC-SHA256 state keyed with `key` (any length is accepted).
fn keyed(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        // HMAC takes keys of any length; new_from_slice cannot fail for it.
        Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
    }
}

/// HMAC(key, "proof" || transcript).
fn proof(key: &HmacSha256, transcript: &[u8]) -> [u8; MAC_LEN] {
    let mut mac = key.clone();
    mac.update(PROOF_LABEL);
    mac.update(transcript);
    mac.finalize().into_bytes().into()
}

/// HMAC(key, sequence || header || payload), the header and payload given contiguous.
fn frame_tag(key: &HmacSha256, sequence: u64, header_and_payload: &[u8]) -> [u8; MAC_LEN] {
    let mut mac = key.clone();
    mac.update(&sequence.to_le_bytes());
    mac.update(header_and_payload);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> MigrationKey {
        MigrationKey::from_bytes(&[byte; 32]).unwrap()
    }

    #[test]
    fn both_sides_agree_and_directions_differ() {
        let (source_nonce, destination_nonce) = ([1u8; 32], [2u8; 32]);
        let source = SessionKeys::derive(&key(9), Role::Source, &source_nonce, &destination_nonce);
        let destination = SessionKeys::derive(
            &key(9),
            Role::Destination,
            &source_nonce,
            &destination_nonce,
        );
        let transcript = b"hellos";
        assert!(destination.peer_proof_matches(transcript, &source.our_proof(transcript)));
        assert!(source.peer_proof_matches(transcript, &destination.our_proof(transcript)));
        // A reflected proof or tag does not verify.
        assert!(!source.peer_proof_matches(transcript, &source.our_proof(transcript)));
        let frame = b"header and payload";
        let tag = source.send_tag(0, frame);
        assert!(destination.receive_tag_matches(0, &frame[..6], &frame[6..], &tag));
        assert!(!destination.receive_tag_matches(1, &frame[..6], &frame[6..], &tag));
        assert!(!source.receive_tag_matches(0, &frame[..6], &frame[6..], &tag));
        assert!(!destination.receive_tag_matches(0, &frame[..6], &frame[6..], &tag[..31]));
    }

    #[test]
    fn keys_depend_on_the_shared_key_and_both_nonces() {
        let transcript = b"t";
        let reference = SessionKeys::derive(&key(1), Role::Source, &[1; 32], &[2; 32]);
        for other in [
            SessionKeys::derive(&key(2), Role::Destination, &[1; 32], &[2; 32]),
            SessionKeys::derive(&key(1), Role::Destination, &[3; 32], &[2; 32]),
            SessionKeys::derive(&key(1), Role::Destination, &[1; 32], &[3; 32]),
        ] {
            assert!(!other.peer_proof_matches(transcript, &reference.our_proof(transcript)));
        }
    }
}
