//! Both ends of the migration stream over real sockets (TCP on 127.0.0.1 and
//! `UnixStream::pair`), with a man in the middle that corrupts, replays, drops, reorders and
//! reflects frames.
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use memvisor_migration::{
    FrameHeader, Hello, MemoryStream, Message, MessageKind, MigrationError, MigrationKey,
    RegionInfo, Role, HELLO_LEN, MAX_PAYLOAD,
};

/// Long enough for a slow CI machine, short enough that a hang fails the test.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of the handshake each side sends: a hello and a proof.
const HANDSHAKE_BYTES: u64 = HELLO_LEN as u64 + 32;

fn key(byte: u8) -> MigrationKey {
    MigrationKey::from_bytes(&[byte; 32]).unwrap()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let connecting = thread::spawn(move || TcpStream::connect(address).unwrap());
    let (accepted, _) = listener.accept().unwrap();
    let connected = connecting.join().unwrap();
    for stream in [&connected, &accepted] {
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    }
    (connected, accepted)
}

fn unix_pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    for stream in [&a, &b] {
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    }
    (a, b)
}

/// Handshakes both ends at once: the source here, the destination on a thread.
fn handshake<A, B>(
    source: A,
    source_key: MigrationKey,
    destination: B,
    destination_key: MigrationKey,
) -> (
    Result<MemoryStream<A>, MigrationError>,
    Result<MemoryStream<B>, MigrationError>,
)
where
    A: Read + Write,
    B: Read + Write + Send + 'static,
{
    let destination = thread::spawn(move || {
        MemoryStream::handshake(destination, &destination_key, Role::Destination)
    });
    let source = MemoryStream::handshake(source, &source_key, Role::Source);
    (source, destination.join().unwrap())
}

fn connected<A, B>(source: A, destination: B) -> (MemoryStream<A>, MemoryStream<B>)
where
    A: Read + Write,
    B: Read + Write + Send + 'static,
{
    let (source, destination) = handshake(source, key(1), destination, key(1));
    (source.unwrap(), destination.unwrap())
}

fn patterned(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed) ^ (index >> 12) as u8)
        .collect()
}

/// A whole migration's worth of messages from the source, `Finish` last.
fn source_messages() -> Vec<Message> {
    vec![
        Message::Begin {
            migration: 42,
            regions: vec![
                RegionInfo {
                    name: "pc.ram".into(),
                    bytes: 8 << 30,
                    page_size: 4096,
                },
                RegionInfo {
                    name: "vga.vram".into(),
                    bytes: 16 << 20,
                    page_size: 2 << 20,
                },
            ],
        },
        Message::pages(0, 0, 4096, patterned(4096, 1)),
        Message::pages(0, 1024, 4096, patterned(4 << 20, 2)),
        Message::pages(1, 2, 2 << 20, patterned(4 << 20, 3)),
        Message::page_runs(
            0,
            4096,
            vec![(5, 1), (9, 3), (12, 1), (4000, 2)],
            patterned(7 * 4096, 5),
        ),
        Message::Zero {
            region: 0,
            first_page: 2048,
            pages: 1 << 20,
        },
        Message::RoundEnd {
            round: 0,
            pages: 2 + (1 << 20),
        },
        Message::Abort {
            reason: "only a test: an Abort in the middle".into(),
        },
        Message::Finish,
    ]
}

/// Runs a whole session: every message each way, compared on arrival.
fn exchange_everything<A, B>(source: A, destination: B)
where
    A: Read + Write,
    B: Read + Write + Send + 'static,
{
    let (mut source, mut destination) = connected(source, destination);
    let destination = thread::spawn(move || {
        let expected = source_messages();
        for (index, want) in expected.iter().enumerate() {
            let got = destination.receive().unwrap();
            assert_eq!(&got, want, "message {index}");
            match got {
                Message::Begin { .. } => destination.send(&Message::Ready).unwrap(),
                Message::Finish => destination
                    .send(&Message::Done {
                        pages: 2049 + (1 << 20),
                        bytes: 12 << 20,
                    })
                    .unwrap(),
                _ => {}
            }
        }
        destination
    });
    let messages = source_messages();
    source.send(&messages[0]).unwrap();
    assert_eq!(source.receive().unwrap(), Message::Ready);
    for message in &messages[1..] {
        source.send(message).unwrap();
    }
    assert_eq!(
        source.receive().unwrap(),
        Message::Done {
            pages: 2049 + (1 << 20),
            bytes: 12 << 20
        }
    );
    let destination = destination.join().unwrap();
    assert_eq!(source.bytes_sent(), destination.bytes_received());
    assert_eq!(source.bytes_received(), destination.bytes_sent());
    assert!(source.bytes_sent() > 8 << 20);
    assert_eq!(source.frames_sent(), 9);
    assert_eq!(destination.frames_sent(), 2);
}

#[test]
fn every_message_round_trips_over_tcp() {
    let (source, destination) = tcp_pair();
    exchange_everything(source, destination);
}

#[test]
fn every_message_round_trips_over_a_unix_socket_pair() {
    let (source, destination) = unix_pair();
    exchange_everything(source, destination);
}

#[test]
fn a_wrong_key_fails_on_both_sides_before_any_message() {
    let (source, destination) = tcp_pair();
    let (source, destination) = handshake(source, key(1), destination, key(2));
    let source = source.expect_err("the source must refuse");
    let destination = destination.expect_err("the destination must refuse");
    assert!(
        matches!(destination, MigrationError::KeyMismatch),
        "{destination}"
    );
    assert!(matches!(source, MigrationError::KeyMismatch), "{source}");
    assert_eq!(
        destination.to_string(),
        "the peer's migration key differs from ours"
    );
}

#[test]
fn keys_from_files_authenticate_and_a_lost_newline_is_a_different_key() {
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("source.key");
    MigrationKey::generate(&generated).unwrap();
    let bytes = std::fs::read(&generated).unwrap();
    let copy = dir.path().join("copy.key");
    let trimmed = dir.path().join("trimmed.key");
    std::fs::write(&copy, &bytes).unwrap();
    std::fs::write(&trimmed, &bytes[..bytes.len() - 1]).unwrap();
    for path in [&copy, &trimmed] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let load = |path: &std::path::Path| MigrationKey::load(path).unwrap();

    let (source, destination) = unix_pair();
    let (source, destination) = handshake(source, load(&generated), destination, load(&copy));
    assert!(source.is_ok() && destination.is_ok());

    let (source, destination) = unix_pair();
    let (source, destination) = handshake(source, load(&generated), destination, load(&trimmed));
    assert!(matches!(source, Err(MigrationError::KeyMismatch)));
    assert!(matches!(destination, Err(MigrationError::KeyMismatch)));
}

#[test]
fn an_impostor_source_is_refused_before_any_frame() {
    let (mut impostor, destination) = tcp_pair();
    let destination =
        thread::spawn(move || MemoryStream::handshake(destination, &key(1), Role::Destination));
    // A hello and a guessed proof.
    impostor
        .write_all(&Hello::new(Role::Source).unwrap().encode())
        .unwrap();
    impostor.write_all(&[0x5a; 32]).unwrap();
    let error = destination.join().unwrap().expect_err("refused");
    assert!(matches!(error, MigrationError::KeyMismatch), "{error}");
    // The impostor got the destination's hello and a refusal, nothing that proves the key.
    let mut answer = Vec::new();
    impostor.read_to_end(&mut answer).unwrap();
    assert_eq!(answer.len(), HELLO_LEN + 32);
    assert_eq!(&answer[HELLO_LEN..], b"memvisor-migration:key-refused!!");
}

#[test]
fn an_impostor_destination_is_refused_and_gets_no_memory() {
    let (source, mut impostor) = tcp_pair();
    let fake = thread::spawn(move || {
        let mut hello = [0u8; HELLO_LEN];
        impostor.read_exact(&mut hello).unwrap();
        impostor
            .write_all(&Hello::new(Role::Destination).unwrap().encode())
            .unwrap();
        let mut proof = [0u8; 32];
        impostor.read_exact(&mut proof).unwrap();
        impostor.write_all(&[0xa5; 32]).unwrap();
        let mut rest = Vec::new();
        impostor.read_to_end(&mut rest).unwrap();
        rest
    });
    let error = MemoryStream::handshake(source, &key(1), Role::Source).expect_err("refused");
    assert!(matches!(error, MigrationError::KeyMismatch), "{error}");
    // The source's stream was dropped with the error: nothing followed its proof.
    assert_eq!(fake.join().unwrap(), Vec::<u8>::new());
}

/// What the man in the middle does to the records one side writes. Records are counted per
/// `write` call: the stream writes each record (hello, proof, frame) with one call, and this
/// wrapper always takes all of it. Record 0 is the hello, 1 the proof, 2 + n frame n.
#[derive(Clone)]
enum Tampering {
    FlipBit {
        record: usize,
        byte: usize,
        bit: u8,
    },
    Duplicate {
        record: usize,
    },
    Drop {
        record: usize,
    },
    SwapWithNext {
        record: usize,
    },
    Replace {
        record: usize,
        with: Log,
        index: usize,
    },
    /// Writes only the first `keep` bytes of the record and nothing after it.
    Cut {
        record: usize,
        keep: usize,
    },
}

type Log = Arc<Mutex<Vec<Vec<u8>>>>;

struct Tamper<S> {
    inner: S,
    tampering: Option<Tampering>,
    records: usize,
    held: Option<Vec<u8>>,
    log: Log,
}

impl<S> Tamper<S> {
    fn new(inner: S, tampering: Option<Tampering>) -> Self {
        Tamper {
            inner,
            tampering,
            records: 0,
            held: None,
            log: Log::default(),
        }
    }
}

impl<S: Read> Read for Tamper<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Tamper<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let record = self.records;
        self.records += 1;
        self.log.lock().unwrap().push(buf.to_vec());
        match &self.tampering {
            Some(Tampering::FlipBit {
                record: r,
                byte,
                bit,
            }) if *r == record => {
                let mut bytes = buf.to_vec();
                bytes[*byte] ^= 1 << bit;
                self.inner.write_all(&bytes)?;
            }
            Some(Tampering::Duplicate { record: r }) if *r == record => {
                self.inner.write_all(buf)?;
                self.inner.write_all(buf)?;
            }
            Some(Tampering::Drop { record: r }) if *r == record => {}
            Some(Tampering::SwapWithNext { record: r }) if *r == record => {
                self.held = Some(buf.to_vec());
            }
            Some(Tampering::SwapWithNext { record: r }) if *r + 1 == record => {
                self.inner.write_all(buf)?;
                let held = self.held.take().unwrap();
                self.inner.write_all(&held)?;
            }
            Some(Tampering::Replace {
                record: r,
                with,
                index,
            }) if *r == record => {
                let replacement = with.lock().unwrap()[*index].clone();
                self.inner.write_all(&replacement)?;
            }
            Some(Tampering::Cut { record: r, keep }) if *r == record => {
                self.inner.write_all(&buf[..*keep])?;
            }
            Some(Tampering::Cut { record: r, .. }) if *r < record => {}
            _ => self.inner.write_all(buf)?,
        }
        Ok(buf.len())
    }

    /// A frame goes out as one vectored write (header and fields, page data, tag): one record.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let record: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write(&record)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Frames the tampered source sends: frame 1 is a two-page `Pages` (8228-byte payload).
fn tampered_frames() -> Vec<Message> {
    vec![
        Message::Ready,
        Message::pages(3, 7, 4096, patterned(8192, 9)),
        Message::RoundEnd { round: 1, pages: 2 },
        Message::Finish,
    ]
}

/// Sends `tampered_frames` through `tampering` on the source's side, then closes; returns what
/// the destination's receive calls gave, up to and including four after the first error.
fn receive_tampered(tampering: Tampering) -> Vec<Result<Message, MigrationError>> {
    let (source, destination) = unix_pair();
    let (mut source, mut destination) =
        connected(Tamper::new(source, Some(tampering)), destination);
    for message in tampered_frames() {
        source.send(&message).unwrap();
    }
    source.get_ref().inner.shutdown(Shutdown::Write).unwrap();
    let mut results = Vec::new();
    let mut errors = 0;
    while errors < 4 && results.len() < 16 {
        let result = destination.receive();
        errors += usize::from(result.is_err());
        results.push(result);
    }
    results
}

/// Checks that frames before `sequence` arrived intact, frame `sequence` failed its MAC, and
/// every receive after it fails too.
fn assert_integrity_failure_at(results: &[Result<Message, MigrationError>], sequence: u64) {
    let expected = tampered_frames();
    for (index, result) in results.iter().enumerate().take(sequence as usize) {
        assert_eq!(result.as_ref().unwrap(), &expected[index]);
    }
    match &results[sequence as usize] {
        Err(MigrationError::Integrity { sequence: s, .. }) => assert_eq!(*s, sequence),
        other => panic!("frame {sequence}: expected an integrity error, got {other:?}"),
    }
    for later in &results[sequence as usize + 1..] {
        let error = later.as_ref().expect_err("every later receive fails");
        assert!(
            matches!(
                error,
                MigrationError::Unusable {
                    direction: "receive",
                    ..
                }
            ),
            "{error}"
        );
        assert!(
            error.to_string().contains(&format!("frame {sequence}")),
            "{error}"
        );
    }
}

#[test]
fn a_flipped_bit_anywhere_in_a_frame_fails_integrity() {
    // Frame 1 (record 3): header 0..8, payload 8..8236, tag 8236..8268.
    let places = [
        (0, 0, "magic"),
        (3, 1, "message type"),
        (4, 0, "payload length, longer"),
        (4, 2, "payload length, shorter"),
        (8, 0, "region field"),
        (8 + 16 + 4, 3, "run's first page"),
        (8 + 16 + 8, 0, "run's page count"),
        (8 + 28 + 4, 5, "second page checksum"),
        (8 + 36 + 5000, 7, "page data"),
        (8235, 0, "last payload byte"),
        (8236, 0, "first tag byte"),
        (8267, 7, "last tag byte"),
    ];
    for (byte, bit, what) in places {
        let results = receive_tampered(Tampering::FlipBit {
            record: 3,
            byte,
            bit,
        });
        assert!(results.len() >= 5, "{what}: {results:?}");
        assert_integrity_failure_at(&results, 1);
        let error = results[1].as_ref().unwrap_err().to_string();
        assert!(
            error.starts_with("frame 1 (announced as "),
            "{what}: {error}"
        );
    }
}

#[test]
fn a_length_flipped_over_the_limit_is_refused_before_reading() {
    let results = receive_tampered(Tampering::FlipBit {
        record: 3,
        byte: 7,
        bit: 7,
    });
    assert_eq!(results[0].as_ref().unwrap(), &Message::Ready);
    let error = results[1].as_ref().unwrap_err();
    assert!(
        matches!(error, MigrationError::FrameTooLarge { sequence: 1, len, .. } if *len == 8228 | 0x8000_0000),
        "{error}"
    );
    assert!(results[2].is_err());
}

#[test]
fn a_replayed_frame_fails_integrity() {
    let results = receive_tampered(Tampering::Duplicate { record: 2 });
    assert_integrity_failure_at(&results, 1);
}

#[test]
fn a_dropped_frame_fails_integrity() {
    let results = receive_tampered(Tampering::Drop { record: 3 });
    assert_integrity_failure_at(&results, 1);
}

#[test]
fn reordered_frames_fail_integrity() {
    let results = receive_tampered(Tampering::SwapWithNext { record: 2 });
    assert_integrity_failure_at(&results, 0);
}

#[test]
fn a_reflected_frame_fails_integrity() {
    // The destination speaks first here; its frame 0 is sent back to it as the source's frame 0.
    let (source, destination) = unix_pair();
    let destination = Tamper::new(destination, None);
    let destination_log = destination.log.clone();
    let source = Tamper::new(
        source,
        Some(Tampering::Replace {
            record: 2,
            with: destination_log,
            index: 2,
        }),
    );
    let (mut source, mut destination) = connected(source, destination);
    destination.send(&Message::Ready).unwrap();
    assert_eq!(source.receive().unwrap(), Message::Ready);
    source.send(&Message::Ready).unwrap();
    source.send(&Message::Finish).unwrap();
    let error = destination.receive().unwrap_err();
    assert!(
        matches!(error, MigrationError::Integrity { sequence: 0, .. }),
        "{error}"
    );
    assert!(destination.receive().is_err());
}

#[test]
fn an_oversized_frame_length_is_refused() {
    for len in [MAX_PAYLOAD as u32 + 1, u32::MAX] {
        let (source, destination) = tcp_pair();
        let (mut source, mut destination) = connected(source, destination);
        let header = FrameHeader {
            kind: MessageKind::Pages,
            payload_len: len,
        };
        source.get_mut().write_all(&header.encode()).unwrap();
        let error = destination.receive().unwrap_err();
        assert!(
            matches!(error, MigrationError::FrameTooLarge { sequence: 0, len: l, max } if l == len && max == MAX_PAYLOAD),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "frame 0 announces a {len}-byte payload, over the {MAX_PAYLOAD}-byte limit; \
                 refused before reading it"
            )
        );
    }
}

#[test]
fn a_peer_closing_mid_frame_is_named_not_waited_for() {
    let cases: [(usize, &str); 3] = [
        (
            8 + 1000,
            "after 1000 of 8260 bytes of frame 1 (announced as Pages, 8228-byte payload + \
             32-byte tag)",
        ),
        (5, "after 5 of 8 bytes of frame 1's header"),
        (0, "after 0 of 8 bytes of frame 1's header"),
    ];
    for (keep, expected) in cases {
        let (source, destination) = tcp_pair();
        let source = Tamper::new(source, Some(Tampering::Cut { record: 3, keep }));
        let (mut source, mut destination) = connected(source, destination);
        source.send(&Message::Ready).unwrap();
        source
            .send(&Message::pages(0, 0, 4096, patterned(8192, 1)))
            .unwrap();
        drop(source);
        assert_eq!(destination.receive().unwrap(), Message::Ready);
        let error = destination.receive().unwrap_err();
        assert!(
            matches!(error, MigrationError::UnexpectedEnd { .. }),
            "{error}"
        );
        let text = error.to_string();
        assert!(
            text.starts_with("unexpected end of stream: the peer closed it"),
            "{text}"
        );
        assert!(text.ends_with(expected), "{text}");
    }
}

#[test]
fn a_page_with_a_wrong_checksum_names_region_and_page() {
    let (source, destination) = unix_pair();
    let (mut source, mut destination) = connected(source, destination);
    let Message::Pages {
        region,
        page_size,
        runs,
        mut crcs,
        data,
    } = Message::pages(5, 100, 4096, patterned(3 * 4096, 4))
    else {
        unreachable!()
    };
    crcs[1] ^= 1;
    source
        .send(&Message::Pages {
            region,
            page_size,
            runs,
            crcs,
            data,
        })
        .unwrap();
    let error = destination.receive().unwrap_err();
    assert!(
        matches!(
            error,
            MigrationError::Checksum {
                region: 5,
                page: 101,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("page 101 of region 5"),
        "{error}"
    );
}

#[test]
fn handshake_bytes_are_counted() {
    let (source, destination) = unix_pair();
    let (source, destination) = connected(source, destination);
    assert_eq!(source.bytes_sent(), HANDSHAKE_BYTES);
    assert_eq!(source.bytes_received(), HANDSHAKE_BYTES);
    assert_eq!(destination.bytes_sent(), HANDSHAKE_BYTES);
    assert_eq!(destination.bytes_received(), HANDSHAKE_BYTES);
}
