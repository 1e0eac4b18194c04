//! The fixed-size header in front of every frame's payload.

use crate::message_kind::MessageKind;
use crate::migration_error::MigrationError;

/// The first three bytes of every frame header.
pub const FRAME_MAGIC: [u8; 3] = *b"MVm";
/// Bytes in a frame header: magic (3), message type (1), payload length (u32 LE).
pub const FRAME_HEADER_LEN: usize = 8;
/// Bytes in a frame's tag: keyed BLAKE3 over sequence number, header and payload.
pub const FRAME_TAG_LEN: usize = 32;
/// The longest payload a frame may carry: 4 MiB of page data plus 64 KiB for the message's
/// fields and per-page checksums. A header announcing more is refused before allocating.
pub const MAX_PAYLOAD: usize = 4 * 1024 * 1024 + 64 * 1024;
/// The longest frame on the wire: header, [`MAX_PAYLOAD`] and tag.
pub const MAX_FRAME_LEN: usize = FRAME_HEADER_LEN + MAX_PAYLOAD + FRAME_TAG_LEN;

/// A parsed frame header: which message the payload holds and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The message type.
    pub kind: MessageKind,
    /// The payload's length in bytes, at most [`MAX_PAYLOAD`].
    pub payload_len: u32,
}

impl FrameHeader {
    /// Parses a header: exactly [`FRAME_HEADER_LEN`] bytes, the magic, a known message type,
    /// and a payload length of at most [`MAX_PAYLOAD`].
    pub fn parse(bytes: &[u8]) -> Result<FrameHeader, MigrationError> {
        let problem = |problem: String| MigrationError::FrameHeader { problem };
        let Ok(bytes) = <&[u8; FRAME_HEADER_LEN]>::try_from(bytes) else {
            return Err(problem(format!(
                "it is {} bytes long, expected {FRAME_HEADER_LEN}",
                bytes.len()
            )));
        };
        if bytes[..3] != FRAME_MAGIC {
            return Err(problem(format!(
                "bytes 0..3 are {:02x?}, expected the magic {FRAME_MAGIC:02x?}",
                &bytes[..3]
            )));
        }
        let kind = MessageKind::from_byte(bytes[3]).ok_or_else(|| {
            problem(format!(
                "byte 3 is an unknown message type {:#04x}",
                bytes[3]
            ))
        })?;
        let payload_len = announced_payload_len(bytes);
        if payload_len as usize > MAX_PAYLOAD {
            return Err(problem(format!(
                "{} message announces a {payload_len}-byte payload, over the {MAX_PAYLOAD}-byte \
                 limit",
                kind.name()
            )));
        }
        Ok(FrameHeader { kind, payload_len })
    }

    /// The header's wire bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut bytes = [0u8; FRAME_HEADER_LEN];
        bytes[..3].copy_from_slice(&FRAME_MAGIC);
        bytes[3] = self.kind.to_byte();
        bytes[4..].copy_from_slice(&self.payload_len.to_le_bytes());
        bytes
    }
}

/// The payload length a header's bytes announce, unchecked (the receiver needs it to bound its
/// read before the MAC can be checked).
pub(crate) fn announced_payload_len(bytes: &[u8; FRAME_HEADER_LEN]) -> u32 {
    u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        for kind in MessageKind::ALL {
            for payload_len in [0, 1, 4096, MAX_PAYLOAD as u32] {
                let header = FrameHeader { kind, payload_len };
                assert_eq!(FrameHeader::parse(&header.encode()).unwrap(), header);
            }
        }
    }

    #[test]
    fn refuses_bad_headers_with_a_reason() {
        let good = FrameHeader {
            kind: MessageKind::Pages,
            payload_len: 10,
        }
        .encode();
        let error = |bytes: &[u8]| FrameHeader::parse(bytes).unwrap_err().to_string();
        assert!(error(&good[..7]).contains("7 bytes long, expected 8"));
        assert!(error(&[0; 9]).contains("9 bytes long"));
        let mut bad = good;
        bad[0] ^= 1;
        assert!(error(&bad).contains("expected the magic"));
        let mut bad = good;
        bad[3] = 0;
        assert!(error(&bad).contains("unknown message type 0x00"));
        let mut bad = good;
        bad[4..].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert!(error(&bad).contains("Pages message announces a 4259841-byte payload"));
    }
}
