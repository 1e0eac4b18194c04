//! The authenticated, framed message stream between the two pagers.

use std::fmt;
use std::io::{Read, Write};
use std::time::Duration;

use memvisor_control::{DeadlineStream, TimeoutSocket};

use crate::frame_header::{
    announced_payload_len, FrameHeader, FRAME_HEADER_LEN, FRAME_TAG_LEN, MAX_PAYLOAD,
};
use crate::handshake::authenticate;
use crate::message::{
    decode_pages_parts, decode_payload, encode_payload_head, pages_head_len, Message,
    PAGES_FIELDS_LEN,
};
use crate::message_kind::MessageKind;
use crate::migration_error::MigrationError;
use crate::migration_key::MigrationKey;
use crate::receive_buffer::ReceiveBuffer;
use crate::role::Role;
use crate::session_keys::SessionKeys;
use crate::wire_io::write_record_parts;

/// Queued frames are written once they reach this many bytes.
const QUEUE_FLUSH_AT: usize = 256 * 1024;
/// A queued frame with more page data than this is written at once, its data from where it is
/// (a vectored write), not copied into the queue.
const QUEUE_MAX_DATA: usize = 64 * 1024;

/// One end of an authenticated migration stream over `S` (a `TcpStream`, a `UnixStream`, ...).
///
/// Every frame carries a MAC (keyed BLAKE3) over the direction's implicit sequence number (from
/// 0, never on the wire), its header and its payload, under a key of this connection and
/// direction: a corrupted, replayed, reordered, dropped or reflected frame fails with
/// [`MigrationError::Integrity`]. Any error while receiving closes the receiving direction and
/// any error while writing closes the sending direction: later calls fail with
/// [`MigrationError::Unusable`]. (After a receive error the other direction still works, so a
/// side can still send [`Message::Abort`].) Timeouts are the stream's: set them on `S`.
pub struct MemoryStream<S: Read + Write> {
    stream: S,
    role: Role,
    keys: SessionKeys,
    send_sequence: u64,
    receive_sequence: u64,
    bytes_sent: u64,
    bytes_received: u64,
    send_failure: Option<String>,
    receive_failure: Option<String>,
    /// The frame being sent (header, payload, tag), reused.
    send_buffer: Vec<u8>,
    /// Whole frames queued by [`MemoryStream::queue`], not yet written.
    queued: Vec<u8>,
    /// Bytes read from the stream ahead of the frame being received.
    read_ahead: ReceiveBuffer,
    /// The payload and tag being received, reused.
    receive_buffer: Vec<u8>,
}

impl<S: Read + Write + TimeoutSocket> MemoryStream<S>
where
    for<'a> &'a S: Read + Write,
{
    /// [`handshake`](Self::handshake) on a socket, the whole exchange within `limit` however
    /// slowly the peer sends its bytes: a connection that trickles its hello is cut, not
    /// waited for byte by byte (a per-read timeout would restart with every byte). Afterwards
    /// the socket's read and write timeouts are what the deadline left: the caller sets its
    /// own. Running out of time is a stream error of kind `TimedOut` or `WouldBlock`.
    pub fn handshake_within(
        stream: S,
        key: &MigrationKey,
        role: Role,
        limit: Duration,
    ) -> Result<Self, MigrationError> {
        let mut bytes_sent = 0;
        let mut bytes_received = 0;
        let keys = authenticate(
            &mut DeadlineStream::new(&stream, limit),
            key,
            role,
            &mut bytes_sent,
            &mut bytes_received,
        )?;
        Ok(Self::authenticated(
            stream,
            role,
            keys,
            bytes_sent,
            bytes_received,
        ))
    }
}

impl<S: Read + Write> MemoryStream<S> {
    /// Authenticates both ends over `stream` and returns the stream ready for messages.
    ///
    /// Both sides send a hello (protocol version, role, 32-byte random nonce). Per-direction
    /// keys `k_src_to_dst` and `k_dst_to_src` are MAC(root, label || source nonce || destination
    /// nonce) with distinct labels, the MAC being keyed BLAKE3 and the root key derived from the
    /// key file's secret. Each side then proves the key with MAC(its send key, "proof" || both
    /// hellos as sent); the destination checks the
    /// source's proof before sending its own, and the source checks the destination's.
    ///
    /// Errors: [`MigrationError::KeyMismatch`] for a different key (on both sides),
    /// [`MigrationError::Version`], [`MigrationError::RoleClash`] if both ends claim the same
    /// role, [`MigrationError::NotMigrationPeer`] for something that is not a memvisor pager,
    /// and stream errors. A peer on a network socket goes through
    /// [`handshake_within`](Self::handshake_within), which bounds the exchange in time.
    pub fn handshake(
        mut stream: S,
        key: &MigrationKey,
        role: Role,
    ) -> Result<Self, MigrationError> {
        let mut bytes_sent = 0;
        let mut bytes_received = 0;
        let keys = authenticate(&mut stream, key, role, &mut bytes_sent, &mut bytes_received)?;
        Ok(Self::authenticated(
            stream,
            role,
            keys,
            bytes_sent,
            bytes_received,
        ))
    }

    /// The stream after a successful handshake.
    fn authenticated(
        stream: S,
        role: Role,
        keys: SessionKeys,
        bytes_sent: u64,
        bytes_received: u64,
    ) -> Self {
        MemoryStream {
            stream,
            role,
            keys,
            send_sequence: 0,
            receive_sequence: 0,
            bytes_sent,
            bytes_received,
            send_failure: None,
            receive_failure: None,
            send_buffer: Vec::new(),
            queued: Vec::new(),
            read_ahead: ReceiveBuffer::new(),
            receive_buffer: Vec::new(),
        }
    }

    /// Sends one message as one frame, after any queued ones, and flushes. A message that
    /// breaks the message rules ([`Message::validate`]) is refused with
    /// [`MigrationError::InvalidMessage`] and nothing is sent; a write error closes the sending
    /// direction.
    pub fn send(&mut self, message: &Message) -> Result<(), MigrationError> {
        self.send_or_queue(message, false)
    }

    /// Like [`send`](Self::send), but the frame may wait in a queue (up to 256 KiB of frames)
    /// until the next `send`, [`flush`](Self::flush) or [`receive`](Self::receive), which
    /// write it first. For the many short frames of a round of scattered changes: one write
    /// for many frames, not one each. Frames still queued when the stream is dropped are not
    /// sent.
    pub fn queue(&mut self, message: &Message) -> Result<(), MigrationError> {
        self.send_or_queue(message, true)
    }

    /// Writes the queued frames.
    pub fn flush(&mut self) -> Result<(), MigrationError> {
        self.usable_for_sending()?;
        let result = self.write_queued(&[]);
        self.note_send_failure(&result);
        result
    }

    fn send_or_queue(&mut self, message: &Message, queue: bool) -> Result<(), MigrationError> {
        self.usable_for_sending()?;
        message.validate()?;
        let result = self.send_frame(message, queue);
        self.note_send_failure(&result);
        result
    }

    fn usable_for_sending(&self) -> Result<(), MigrationError> {
        match &self.send_failure {
            Some(first_error) => Err(MigrationError::Unusable {
                direction: "send",
                first_error: first_error.clone(),
            }),
            None => Ok(()),
        }
    }

    fn note_send_failure(&mut self, result: &Result<(), MigrationError>) {
        if let Err(error) = result {
            self.send_failure = Some(error.to_string());
        }
    }

    /// Reads one frame, verifies its MAC, then decodes its message. A bad MAC is
    /// [`MigrationError::Integrity`]; a header announcing more than [`MAX_PAYLOAD`] bytes is
    /// refused before reading or allocating them. Any error closes the receiving direction.
    /// Queued frames are written first (the peer may be waiting for them to answer).
    pub fn receive(&mut self) -> Result<Message, MigrationError> {
        if !self.queued.is_empty() {
            self.flush()?;
        }
        if let Some(first_error) = &self.receive_failure {
            return Err(MigrationError::Unusable {
                direction: "receive",
                first_error: first_error.clone(),
            });
        }
        let result = self.receive_frame();
        if let Err(error) = &result {
            self.receive_failure = Some(error.to_string());
        }
        result
    }

    /// Whether bytes of the next frame were received already (read from the stream into the
    /// receive buffer): [`receive`](Self::receive) needs no `poll` of the stream to start.
    pub fn has_buffered_input(&self) -> bool {
        self.read_ahead.buffered() > 0
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The underlying stream, e.g. to set timeouts. Reading or writing it directly breaks the
    /// framing.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The underlying stream, giving up the message layer.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Bytes written to the stream so far, handshake included.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent
    }

    /// Bytes read from the stream so far, handshake included.
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received
    }

    /// Frames sent so far (the next frame's sequence number).
    pub fn frames_sent(&self) -> u64 {
        self.send_sequence
    }

    /// Frames received and verified so far (the next frame's sequence number).
    pub fn frames_received(&self) -> u64 {
        self.receive_sequence
    }

    /// Encodes and tags one frame, then queues it (with `queue`, if its page data is short) or
    /// writes it after the queued ones. Page data is tagged and written from where it is (a
    /// vectored write), not copied into the frame buffer, unless queued.
    fn send_frame(&mut self, message: &Message, queue: bool) -> Result<(), MigrationError> {
        let sequence = self.send_sequence;
        let head = &mut self.send_buffer;
        head.clear();
        head.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        let page_data = encode_payload_head(message, head);
        let payload_len = head.len() - FRAME_HEADER_LEN + page_data.len();
        if payload_len > MAX_PAYLOAD {
            // validate() keeps every message under the limit; this guards the invariant.
            return Err(MigrationError::InvalidMessage {
                message: message.name(),
                problem: format!(
                    "its payload is {payload_len} bytes, over the {MAX_PAYLOAD}-byte limit"
                ),
            });
        }
        let header = FrameHeader {
            kind: message.kind(),
            payload_len: payload_len as u32,
        };
        head[..FRAME_HEADER_LEN].copy_from_slice(&header.encode());
        let tag = self.keys.send_tag(sequence, &[head], page_data);
        self.send_sequence += 1;
        if queue && page_data.len() <= QUEUE_MAX_DATA {
            self.queued.extend_from_slice(head);
            self.queued.extend_from_slice(page_data);
            self.queued.extend_from_slice(&tag);
            if self.queued.len() < QUEUE_FLUSH_AT {
                return Ok(());
            }
            return self.write_queued(&[]);
        }
        let head = std::mem::take(&mut self.send_buffer);
        let written = self.write_queued(&[&head, page_data, &tag]);
        self.send_buffer = head;
        written
    }

    /// Writes the queued frames, then `frame` (a frame's parts, or nothing), and flushes.
    fn write_queued(&mut self, frame: &[&[u8]]) -> Result<(), MigrationError> {
        let queued = std::mem::take(&mut self.queued);
        let frames_queued = queued.len();
        let frame_len: usize = frame.iter().map(|p| p.len()).sum();
        let next = self.send_sequence;
        let mut parts = Vec::with_capacity(frame.len() + 1);
        parts.push(&queued[..]);
        parts.extend_from_slice(frame);
        let written = write_record_parts(&mut self.stream, &parts, &mut self.bytes_sent, &|| {
            format!(
                "frames up to {} ({frames_queued} bytes queued, {frame_len} bytes more)",
                next.saturating_sub(1)
            )
        });
        self.queued = queued;
        self.queued.clear();
        written
    }

    /// Reads, verifies and decodes one frame.
    fn receive_frame(&mut self) -> Result<Message, MigrationError> {
        let sequence = self.receive_sequence;
        let mut header = [0u8; FRAME_HEADER_LEN];
        self.read_ahead.read_exact(
            &mut self.stream,
            &mut header,
            &mut self.bytes_received,
            &|| format!("frame {sequence}'s header"),
        )?;
        // Nothing in the header is trusted before the MAC is checked, but the length must
        // bound the read (and the allocation) first.
        let payload_len = announced_payload_len(&header);
        if payload_len as usize > MAX_PAYLOAD {
            return Err(MigrationError::FrameTooLarge {
                sequence,
                len: payload_len,
                max: MAX_PAYLOAD,
            });
        }
        let announced = MessageKind::describe_byte(header[3]);
        let what = || {
            format!(
                "frame {sequence} (announced as {announced}, {payload_len}-byte payload + \
                 {FRAME_TAG_LEN}-byte tag)"
            )
        };
        let payload_len = payload_len as usize;
        if header[3] == MessageKind::Pages.to_byte() && payload_len >= PAGES_FIELDS_LEN {
            return self.receive_pages_frame(sequence, &header, payload_len, &what);
        }
        let body_len = payload_len + FRAME_TAG_LEN;
        if self.receive_buffer.len() < body_len {
            self.receive_buffer.resize(body_len, 0);
        }
        let body = &mut self.receive_buffer[..body_len];
        self.read_ahead
            .read_exact(&mut self.stream, body, &mut self.bytes_received, &what)?;
        let (payload, tag) = body.split_at(payload_len);
        if !self
            .keys
            .receive_tag_matches(sequence, &[&header, payload], &[], tag)
        {
            return Err(integrity(sequence, announced, payload_len));
        }
        self.receive_sequence += 1;
        // Authentic from here on: a bad header or payload is a bug in the peer.
        let header = FrameHeader::parse(&header)?;
        decode_payload(header.kind.to_byte(), payload)
    }

    /// Reads a frame announced as `Pages` with its page data in a buffer of its own, which
    /// becomes the message's data (no copy): the fields and checksums first, split where their
    /// (not yet authenticated) count says; then the data and the tag; then the MAC over all of
    /// it. A count that does not fit the payload reads the whole payload as the head (the MAC
    /// or the decoder then refuses it).
    fn receive_pages_frame(
        &mut self,
        sequence: u64,
        header: &[u8; FRAME_HEADER_LEN],
        payload_len: usize,
        what: &dyn Fn() -> String,
    ) -> Result<Message, MigrationError> {
        let body_len = payload_len + FRAME_TAG_LEN;
        if self.receive_buffer.len() < body_len {
            self.receive_buffer.resize(body_len, 0);
        }
        // Each piece is read on its own; a peer closing mid-frame is told in bytes of the
        // whole frame body, as for any other frame.
        let within_body =
            |offset: usize| move |error: MigrationError| error.within(offset, body_len);
        let fields = &mut self.receive_buffer[..PAGES_FIELDS_LEN];
        self.read_ahead
            .read_exact(&mut self.stream, fields, &mut self.bytes_received, what)
            .map_err(within_body(0))?;
        let head_len = pages_head_len(fields)
            .filter(|&len| len <= payload_len)
            .unwrap_or(payload_len);
        let rest_of_head = &mut self.receive_buffer[PAGES_FIELDS_LEN..head_len];
        self.read_ahead
            .read_exact(
                &mut self.stream,
                rest_of_head,
                &mut self.bytes_received,
                what,
            )
            .map_err(within_body(PAGES_FIELDS_LEN))?;
        let data = self
            .read_ahead
            .read_vec(
                &mut self.stream,
                payload_len - head_len,
                &mut self.bytes_received,
                what,
            )
            .map_err(within_body(head_len))?;
        let mut tag = [0u8; FRAME_TAG_LEN];
        self.read_ahead
            .read_exact(&mut self.stream, &mut tag, &mut self.bytes_received, what)
            .map_err(within_body(payload_len))?;
        let head = &self.receive_buffer[..head_len];
        if !self
            .keys
            .receive_tag_matches(sequence, &[header, head], &data, &tag)
        {
            return Err(integrity(
                sequence,
                MessageKind::Pages.name().into(),
                payload_len,
            ));
        }
        self.receive_sequence += 1;
        // Authentic from here on.
        FrameHeader::parse(header)?;
        decode_pages_parts(head, data)
    }
}

/// The error for a frame whose tag does not match.
fn integrity(sequence: u64, announced: String, payload_len: usize) -> MigrationError {
    MigrationError::Integrity {
        sequence,
        announced,
        payload_len: payload_len as u32,
    }
}

impl<S: Read + Write> fmt::Debug for MemoryStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStream")
            .field("role", &self.role)
            .field("frames_sent", &self.send_sequence)
            .field("frames_received", &self.receive_sequence)
            .field("bytes_sent", &self.bytes_sent)
            .field("bytes_received", &self.bytes_received)
            .field("send_failure", &self.send_failure)
            .field("receive_failure", &self.receive_failure)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    #[test]
    fn a_handshake_trickled_byte_by_byte_is_cut_at_its_limit() {
        let key = MigrationKey::from_bytes(&[7; 40]).unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        // A peer that sends a byte every 50 ms: each read would see data well within any
        // per-read timeout, and the 45-byte hello would take over 2 s.
        let trickler = thread::spawn(move || {
            for _ in 0..200 {
                if b.write_all(&[0]).is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        let start = std::time::Instant::now();
        let Err(e) =
            MemoryStream::handshake_within(a, &key, Role::Destination, Duration::from_millis(400))
        else {
            panic!("a trickled handshake must fail");
        };
        let took = start.elapsed();
        assert!(took < Duration::from_secs(2), "took {took:?}: {e}");
        assert!(
            matches!(&e, MigrationError::Io { source, .. }
                if matches!(source.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)),
            "{e:?}"
        );
        trickler.join().unwrap();
    }

    fn pair() -> (MemoryStream<UnixStream>, MemoryStream<UnixStream>) {
        let key = MigrationKey::from_bytes(&[7; 40]).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let destination_key = key.clone();
        let destination =
            thread::spawn(move || MemoryStream::handshake(b, &destination_key, Role::Destination));
        let source = MemoryStream::handshake(a, &key, Role::Source).unwrap();
        (source, destination.join().unwrap().unwrap())
    }

    #[test]
    fn counts_frames_and_wire_bytes() {
        let (mut source, mut destination) = pair();
        assert_eq!(source.bytes_sent(), destination.bytes_received());
        assert_eq!(source.bytes_sent(), 45 + 32);
        source.send(&Message::Ready).unwrap();
        source.send(&Message::Done { pages: 1, bytes: 2 }).unwrap();
        assert_eq!(destination.receive().unwrap(), Message::Ready);
        assert_eq!(
            destination.receive().unwrap(),
            Message::Done { pages: 1, bytes: 2 }
        );
        assert_eq!(source.frames_sent(), 2);
        assert_eq!(destination.frames_received(), 2);
        let frames = 2 * (FRAME_HEADER_LEN + FRAME_TAG_LEN) as u64 + 16;
        assert_eq!(source.bytes_sent(), 45 + 32 + frames);
        assert_eq!(destination.bytes_received(), source.bytes_sent());
        assert_eq!(source.role(), Role::Source);
        assert!(format!("{source:?}").contains("frames_sent: 2"));
    }

    #[test]
    fn queued_frames_wait_for_the_next_send_flush_or_receive() {
        let (mut source, mut destination) = pair();
        let after_handshake = source.bytes_sent();
        let pages = |first| Message::pages(0, first, 4096, vec![first as u8; 4096]);
        for first in 0..3 {
            source.queue(&pages(first)).unwrap();
        }
        // Queued: sequence numbers taken, nothing written yet.
        assert_eq!(source.frames_sent(), 3);
        assert_eq!(source.bytes_sent(), after_handshake);
        source
            .send(&Message::RoundEnd { round: 1, pages: 3 })
            .unwrap();
        for first in 0..3 {
            assert_eq!(destination.receive().unwrap(), pages(first));
        }
        assert_eq!(
            destination.receive().unwrap(),
            Message::RoundEnd { round: 1, pages: 3 }
        );
        // flush() writes them; so does a receive (the peer may be waiting to answer).
        source.queue(&pages(7)).unwrap();
        source.flush().unwrap();
        assert_eq!(destination.receive().unwrap(), pages(7));
        source.queue(&pages(8)).unwrap();
        let answer = thread::spawn(move || {
            let got = destination.receive().unwrap();
            destination
                .send(&Message::Done {
                    pages: 1,
                    bytes: 4096,
                })
                .unwrap();
            got
        });
        assert_eq!(
            source.receive().unwrap(),
            Message::Done {
                pages: 1,
                bytes: 4096
            }
        );
        assert_eq!(answer.join().unwrap(), pages(8));
        // Past 256 KiB the queue is written without waiting.
        let (mut source, mut destination) = pair();
        let reader =
            thread::spawn(move || (0..100).map(|_| destination.receive().unwrap()).count());
        let before = source.bytes_sent();
        for first in 0..100 {
            source.queue(&pages(first)).unwrap();
        }
        assert!(source.bytes_sent() - before >= 256 * 1024);
        source.flush().unwrap();
        assert_eq!(reader.join().unwrap(), 100);
    }

    #[test]
    fn an_invalid_message_is_refused_and_sends_nothing() {
        let (mut source, mut destination) = pair();
        let error = source
            .send(&Message::Zero {
                region: 0,
                first_page: 0,
                pages: 0,
            })
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot send Zero message: covers no pages"
        );
        assert_eq!(source.frames_sent(), 0);
        source.send(&Message::Finish).unwrap();
        assert_eq!(destination.receive().unwrap(), Message::Finish);
    }

    #[test]
    fn after_a_receive_error_receiving_fails_but_sending_works() {
        let (mut source, mut destination) = pair();
        // Bytes that are not a frame of this connection.
        source.get_mut().write_all(&[0u8; 64]).unwrap();
        source.send(&Message::Finish).unwrap();
        let error = destination.receive().unwrap_err();
        assert!(
            matches!(error, MigrationError::Integrity { sequence: 0, .. }),
            "{error}"
        );
        for _ in 0..3 {
            let error = destination.receive().unwrap_err().to_string();
            assert!(
                error.starts_with(
                    "the migration stream can no longer receive after an earlier error: frame 0"
                ),
                "{error}"
            );
        }
        destination
            .send(&Message::Abort {
                reason: "integrity".into(),
            })
            .unwrap();
        assert_eq!(
            source.receive().unwrap(),
            Message::Abort {
                reason: "integrity".into()
            }
        );
    }

    #[test]
    fn a_send_error_closes_the_sending_direction() {
        let (mut source, destination) = pair();
        drop(destination);
        // The first write after the peer closed may still succeed into the socket buffer.
        let mut first_error = None;
        for _ in 0..4 {
            if let Err(error) = source.send(&Message::pages(0, 0, 4096, vec![1; 1 << 20])) {
                first_error = Some(error);
                break;
            }
        }
        let first_error = first_error.expect("writing to a closed peer fails");
        assert!(
            first_error.to_string().starts_with("sending frame"),
            "{first_error}"
        );
        let error = source.send(&Message::Finish).unwrap_err().to_string();
        assert!(
            error.starts_with("the migration stream can no longer send"),
            "{error}"
        );
    }
}
