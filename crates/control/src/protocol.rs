//! The control wire protocol: one JSON object per line, each carrying the protocol version.
//!
//! A client connects to a managed process's socket, writes one [`Request`] line and reads one
//! [`Response`] line; a connection may carry any number of such exchanges. Requests are at most
//! [`MAX_REQUEST_BYTES`] and responses at most [`MAX_RESPONSE_BYTES`] long (newline included);
//! longer lines are refused without being buffered whole.
//!
//! ```text
//! -> {"v":1,"op":"status"}
//! <- {"v":1,"ok":true,"status":{"pid":4242,...}}
//! -> {"v":1,"op":"set","budget_bytes":268435456,"policy":"clock"}
//! -> {"v":1,"op":"set_image_cache","limit_bytes":67108864}
//! <- {"v":1,"ok":false,"error":"policy 'xyz': unknown policy"}
//! <- {"v":1,"ok":false,"busy":true,"error":"8 connections already open; try again"}
//! ```
//!
//! The server answers each request within a deadline counted from when it starts waiting for
//! it, and refuses `set` requests that [`SetRules`](crate::SetRules) refuses.

use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::control_error::ControlError;
use crate::post_copy::PostCopy;
use crate::process_status::ProcessStatus;

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line accepted, newline included.
pub const MAX_REQUEST_BYTES: usize = 4096;
/// Longest response line accepted, newline included.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A snapshot of the process's managed memory.
    Status,
    /// Change the process budget and/or policy; answered with the new status.
    Set {
        /// New process budget in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_bytes: Option<u64>,
        /// New policy spec (`memvisor sim` syntax).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
    },
    /// Set or lift the limit on the host page cache of the process's disk images (checked
    /// with [`SetRules::check_image_cache`](crate::SetRules::check_image_cache)); answered
    /// with the new status.
    SetImageCache {
        /// The limit in bytes; absent: no limit (the kernel's cache as for any file).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit_bytes: Option<u64>,
        /// The image's path as the status shows it; absent: every image, and those found
        /// later.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
    },
    /// Start a live migration of the process's guest memory to a destination process
    /// listening at `to` (checked with [`MigrateRules`](crate::MigrateRules)); answered with
    /// the status, whose `migration` shows the progress.
    Migrate {
        /// The destination's `IP:PORT`.
        to: String,
        /// Absolute path of the shared key file.
        key_file: String,
        /// Bytes per second at most (unlimited if absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bandwidth: Option<u64>,
        /// The rounds are over (converged) once what changed in one round fits this long at
        /// the measured rate.
        downtime_limit_ms: u64,
        /// When the pages changed last are only named at the pause, to follow after the
        /// switch-over while the destination's guest runs.
        #[serde(default)]
        post_copy: PostCopy,
    },
    /// Send the last round (the guest is paused) and wait for the destination's
    /// acknowledgement, in the background; the status shows `completed` when it arrived.
    MigrateFinish,
    /// Stop the migration; the destination discards what it received.
    MigrateCancel,
}

/// What a managed process answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Response {
    /// Success, with the (new) status.
    Status {
        /// Always true.
        ok: bool,
        /// The process's state.
        status: Box<ProcessStatus>,
    },
    /// The process serves as many connections as it allows (overall or for this user): try
    /// again later. The connection is closed after this answer.
    Busy {
        /// Always false.
        ok: bool,
        /// Always true.
        busy: bool,
        /// One-line reason.
        error: String,
    },
    /// Failure.
    Error {
        /// Always false.
        ok: bool,
        /// One-line reason.
        error: String,
    },
}

impl Response {
    /// A success carrying `status`.
    pub fn status(status: ProcessStatus) -> Self {
        Self::Status {
            ok: true,
            status: Box::new(status),
        }
    }

    /// A refusal because the server is full.
    pub fn busy(message: impl Into<String>) -> Self {
        Self::Busy {
            ok: false,
            busy: true,
            error: message.into(),
        }
    }

    /// A failure with `message`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::Error {
            ok: false,
            error: message.into(),
        }
    }
}

/// A message on the wire: the version plus the flattened body.
#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    v: u32,
    #[serde(flatten)]
    body: T,
}

fn encode<T: Serialize>(body: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(&Envelope {
        v: PROTOCOL_VERSION,
        body,
    })
    .unwrap_or_else(|e| {
        format!("{{\"v\":{PROTOCOL_VERSION},\"encode_error\":\"{e}\"}}").into_bytes()
    });
    line.push(b'\n');
    line
}

fn decode<T: for<'de> Deserialize<'de>>(line: &[u8], limit: usize) -> Result<T, ControlError> {
    if line.len() > limit {
        return Err(ControlError::TooLong { limit });
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u32,
    }
    let version: VersionOnly =
        serde_json::from_slice(line).map_err(|e| ControlError::Decode(e.to_string()))?;
    if version.v != PROTOCOL_VERSION {
        return Err(ControlError::Version {
            got: version.v,
            want: PROTOCOL_VERSION,
        });
    }
    let env: Envelope<T> =
        serde_json::from_slice(line).map_err(|e| ControlError::Decode(e.to_string()))?;
    Ok(env.body)
}

/// Encodes a request as one line.
pub fn encode_request(request: &Request) -> Vec<u8> {
    encode(request)
}

/// Encodes a response as one line.
pub fn encode_response(response: &Response) -> Vec<u8> {
    encode(response)
}

/// Decodes one request line (with or without its newline).
pub fn decode_request(line: &[u8]) -> Result<Request, ControlError> {
    decode(line, MAX_REQUEST_BYTES)
}

/// Decodes one response line (with or without its newline).
pub fn decode_response(line: &[u8]) -> Result<Response, ControlError> {
    let r: Response = decode(line, MAX_RESPONSE_BYTES)?;
    match &r {
        Response::Status { ok: true, .. }
        | Response::Busy {
            ok: false,
            busy: true,
            ..
        }
        | Response::Error { ok: false, .. } => Ok(r),
        _ => Err(ControlError::Decode("'ok' disagrees with the body".into())),
    }
}

/// Reads one line of at most `limit` bytes. `Ok(None)` at a clean end of stream; a longer line
/// is an error (and is not buffered beyond the limit).
pub fn read_line_limited(
    reader: &mut impl BufRead,
    limit: usize,
) -> Result<Option<Vec<u8>>, ControlError> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().map_err(ControlError::Read)?;
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(ControlError::Decode(
                    "connection closed inside a message".into(),
                ))
            };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > limit {
            return Err(ControlError::TooLong { limit });
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if done {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request::Status,
            Request::Set {
                budget_bytes: Some(1 << 30),
                policy: None,
            },
            Request::Set {
                budget_bytes: None,
                policy: Some("clock".into()),
            },
            Request::Migrate {
                to: "127.0.0.1:7070".into(),
                key_file: "/etc/memvisor/key".into(),
                max_bandwidth: Some(1 << 30),
                downtime_limit_ms: 300,
                post_copy: PostCopy::Never,
            },
            Request::Migrate {
                to: "127.0.0.1:7070".into(),
                key_file: "/etc/memvisor/key".into(),
                max_bandwidth: None,
                downtime_limit_ms: 30,
                post_copy: PostCopy::Always,
            },
            Request::MigrateFinish,
            Request::MigrateCancel,
        ] {
            let line = encode_request(&r);
            assert!(line.len() <= MAX_REQUEST_BYTES);
            assert!(line.ends_with(b"\n"));
            assert_eq!(decode_request(&line).unwrap(), r);
        }
        assert_eq!(
            decode_request(br#"{"v":1,"op":"status"}"#).unwrap(),
            Request::Status
        );
    }

    #[test]
    fn responses_round_trip() {
        let s = ProcessStatus {
            pid: 7,
            program: "x".into(),
            ..Default::default()
        };
        for r in [
            Response::status(s),
            Response::error("no"),
            Response::busy("full"),
        ] {
            assert_eq!(decode_response(&encode_response(&r)).unwrap(), r);
        }
    }

    #[test]
    fn bad_messages_are_errors() {
        assert!(matches!(
            decode_request(br#"{"v":2,"op":"status"}"#),
            Err(ControlError::Version { got: 2, want: 1 })
        ));
        for bad in [
            &b""[..],
            b"{}",
            b"{\"op\":\"status\"}",
            b"{\"v\":1,\"op\":\"reboot\"}",
            b"{\"v\":1,\"op\":\"set\",\"budget_bytes\":-1}",
            b"[1,2]",
            b"\xff",
        ] {
            assert!(
                decode_request(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(decode_response(br#"{"v":1,"ok":true,"error":"x"}"#).is_err());
        assert!(decode_response(br#"{"v":1,"ok":false,"busy":false,"error":"x"}"#).is_err());
        assert!(matches!(
            decode_response(br#"{"v":1,"ok":false,"busy":true,"error":"x"}"#),
            Ok(Response::Busy { .. })
        ));
        let long = vec![b' '; MAX_REQUEST_BYTES + 1];
        assert!(matches!(
            decode_request(&long),
            Err(ControlError::TooLong { .. })
        ));
    }

    #[test]
    fn line_reader_limits_and_splits() {
        let mut input: &[u8] = b"abc\ndef\nxyz";
        let mut r = std::io::BufReader::with_capacity(2, &mut input);
        assert_eq!(read_line_limited(&mut r, 10).unwrap().unwrap(), b"abc\n");
        assert_eq!(read_line_limited(&mut r, 10).unwrap().unwrap(), b"def\n");
        assert!(read_line_limited(&mut r, 10).is_err());
        let mut input: &[u8] = b"0123456789abc\n";
        assert!(matches!(
            read_line_limited(&mut input, 5),
            Err(ControlError::TooLong { limit: 5 })
        ));
        let mut empty: &[u8] = b"";
        assert!(read_line_limited(&mut empty, 5).unwrap().is_none());
    }
}
