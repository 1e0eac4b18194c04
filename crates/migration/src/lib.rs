//! The authenticated memory stream of memvisor's live migration.
//!
//! During a live migration the memvisor pager inside the source QEMU process sends guest
//! memory straight to the pager inside the destination QEMU process over one TCP connection.
//! This crate is that stream: a shared key file ([`MigrationKey`]), a mutual handshake, frames
//! each with a MAC ([`MemoryStream`], pure protocol over any `Read + Write`), the [`Message`]s,
//! a [`RateLimiter`] for the sender; and the two ends that move a pager's regions over it:
//! [`MemorySender`] (source: rounds of pages read where they are, never faulted in) and
//! [`MemoryReceiver`] (destination: pages in memory within the budget, the rest straight to
//! swap), each reporting to a [`MigrationProgress`].
//!
//! Both pagers run as root next to untrusted local users, so nothing is accepted before the
//! peer has proved it holds the key, every frame is authenticated, and every decoder refuses
//! bad input with a one-line [`MigrationError`] instead of panicking or allocating from a
//! length field it has not bounded.
//!
//! # Handshake
//!
//! ```text
//! source                                          destination
//!   Hello{magic "MVMIGRAT", version u32, role 1, nonce_s[32]} ──►
//!   ◄── Hello{magic, version, role 2, nonce_d[32]}   (both sent at once, 45 bytes each)
//!   MAC(k, m) = BLAKE3 keyed hash of m under the 32-byte key k (protocol version 3; version 1
//!   used HMAC-SHA256, four times as costly per byte; version 2 hashed frames header first)
//!   root = BLAKE3 derive_key("memvisor-migration v3 2026-11-26 root key from the key file", key)
//!   k_src_to_dst = MAC(root, "memvisor-migration v3 key source->destination" || nonce_s || nonce_d)
//!   k_dst_to_src = MAC(root, "memvisor-migration v3 key destination->source" || nonce_s || nonce_d)
//!   proof_s = MAC(k_src_to_dst, "proof" || hello_s || hello_d) ──►
//!                                                 checks proof_s (constant time); if wrong,
//!                                                 sends 32 refusal bytes, closes: KeyMismatch
//!   ◄── proof_d = MAC(k_dst_to_src, "proof" || hello_s || hello_d)
//!   checks proof_d: KeyMismatch if wrong
//! ```
//!
//! # Frames
//!
//! | bytes | field |
//! |---|---|
//! | 3 | magic `"MVm"` |
//! | 1 | message type ([`MessageKind`]) |
//! | 4 | payload length, u32 LE, at most [`MAX_PAYLOAD`] (4 MiB + 64 KiB) |
//! | length | payload ([`encode_payload`]) |
//! | 32 | tag: MAC(direction key, data ‖ sequence u64 LE ‖ header ‖ head ‖ len(data) u64 LE ‖ len(header ‖ head) u64 LE) |
//!
//! `data` is a `Pages` payload's page data and `head` the rest of the payload (for other
//! messages `data` is empty and `head` the whole payload). The page data comes first so that
//! BLAKE3 hashes its 1 KiB chunks side by side: a 4 KiB frame's tag costs 1.6 µs here instead
//! of 3.5 µs with the header first (version 2).
//!
//! Sequence numbers count frames per direction from 0 and are never sent, so a replayed,
//! reordered, dropped or reflected frame fails its MAC ([`MigrationError::Integrity`]). The
//! receiver checks the length against [`MAX_PAYLOAD`] before reading and checks the MAC before
//! looking at anything else.
//!
//! # Payloads (little-endian)
//!
//! | type | message | payload |
//! |---|---|---|
//! | 1 | `Begin` | migration u64, count u32 (≤ 64), then per region: name length u16 (≤ 256), name UTF-8, bytes u64, page size u32 |
//! | 2 | `Ready` | empty |
//! | 3 | `Pages` | region u32, page size u32 (power of two, 4 KiB..=2 MiB), runs u32 (≥ 1), count u32 (≥ 1), runs × (first page u64, pages u32 ≥ 1; ascending, not overlapping, pages summing to count), count × CRC32C u32, count × page size bytes |
//! | 4 | `Zero` | region u32, first page u64, pages u64 (≥ 1) |
//! | 5 | `RoundEnd` | round u32, pages u64 |
//! | 6 | `Finish` | empty |
//! | 7 | `Done` | pages u64, bytes u64 |
//! | 8 | `Abort` | reason length u16 (≤ 1024), reason UTF-8 |
//! | 9 | `Remote` | region u32, runs u32 (1..=65,536), runs × (first page u64, pages u32 ≥ 1; ascending, not overlapping) |
//! | 10 | `Want` | region u32, count u32 (1..=4096), count × page u64 |
//! | 11 | `Resume` | migration u64 |
//!
//! Decoding refuses trailing bytes, unknown types, short payloads, over-long strings, invalid
//! UTF-8, counts that do not fit the payload, and `Pages` whose data fails a CRC32C
//! ([`MigrationError::Checksum`] names the region and page).
//!
//! A session: the source sends `Begin`, the destination answers `Ready`; the source sends
//! rounds of `Pages` and `Zero` each closed by `RoundEnd`, then `Finish`; the destination
//! answers `Done`. Either side may send `Abort` and close.
//!
//! Post-copy (protocol version 4): instead of the last round the source sends `Remote`
//! messages naming the pages changed since they were sent, then `Finish`; after `Done` the
//! destination's guest may run. The source then sends those pages (`Pages`, `Zero`) while the
//! destination sends `Want` for the ones its faults wait on, and ends with `Finish`, answered
//! by `Done` counting every page of the session.
//!
//! Post-copy recovery (protocol version 5): if the connection breaks during the push, neither
//! end gives up. The destination keeps its remote pages (accesses to them wait) and listens
//! again, accepting only a `Resume` naming the migration's number (the random `migration` of
//! its `Begin`); the source reconnects until it gets through (or is cancelled) and sends that
//! `Resume`. The destination answers with its pages still remote (`Remote`) and `Ready`; the
//! source checks that it named every one of them at the pause and pushes them as before, and
//! the closing `Done` counts the pages of that connection.
#![deny(missing_docs)]

mod frame_header;
mod handshake;
mod hello;
mod memory_receiver;
mod memory_sender;
mod memory_stream;
mod message;
mod message_kind;
mod migration_error;
mod migration_key;
mod migration_progress;
mod page_installer;
mod page_runs;
mod payload_reader;
mod post_copy_receiver;
mod push_plan;
mod rate_limiter;
mod read_ahead;
mod readiness;
mod receive_buffer;
mod region_info;
mod role;
mod session_keys;
mod socket_options;
mod wire_io;

pub use frame_header::{
    FrameHeader, FRAME_HEADER_LEN, FRAME_MAGIC, FRAME_TAG_LEN, MAX_FRAME_LEN, MAX_PAYLOAD,
};
pub use hello::{Hello, HELLO_LEN, HELLO_MAGIC, NONCE_LEN, PROTOCOL_VERSION};
pub use memory_receiver::{
    MemoryReceiver, Served, HANDSHAKE_TIMEOUT, IDLE_TIMEOUT, LATE_RESUME_GRACE,
};
pub use memory_sender::{
    MemorySender, SenderOptions, SenderSignals, CONNECT_TIMEOUT, IO_TIMEOUT, RECONNECT_PAUSE,
};
pub use memory_stream::MemoryStream;
pub use message::{
    decode_payload, encode_payload, encode_payload_into, Message, MAX_ABORT_REASON_LEN,
    MAX_PAGES_PAGE_SIZE,
};
pub use message_kind::MessageKind;
pub use migration_error::MigrationError;
pub use migration_key::{MigrationKey, MAX_KEY_LEN, MIN_KEY_LEN};
pub use migration_progress::MigrationProgress;
pub use page_installer::INSTALLS_WAITING;
pub use rate_limiter::{RateLimiter, BURST_TIME};
pub use read_ahead::READS_WAITING;
pub use region_info::{
    RegionInfo, MAX_REGIONS, MAX_REGION_NAME_LEN, MAX_REGION_PAGE_SIZE, MIN_PAGE_SIZE,
};
pub use role::Role;
