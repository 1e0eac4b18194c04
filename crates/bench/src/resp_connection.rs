//! [`RespConnection`]: a minimal RESP2 client over TCP (what the redis benchmark needs: `SET`,
//! `GET`, `INFO`, `SHUTDOWN`), with pipelining left to the caller: `send` any number of
//! commands, then read that many replies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::bench_error::BenchError;

/// One reply of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespReply {
    /// `+OK` and other status lines.
    Status(String),
    /// `:N`.
    Integer(i64),
    /// `$N` bytes, or `None` for a missing key (`$-1`).
    Bulk(Option<Vec<u8>>),
    /// `-ERR ...`.
    Error(String),
}

/// Encodes one command as a RESP array of bulk strings, appended to `out`.
pub fn encode_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// Largest bulk reply accepted (the benchmark's values are far smaller).
const MAX_BULK: usize = 512 << 20;

/// Reads one reply from `r`; `addr` names the server in errors.
pub fn read_reply(r: &mut impl BufRead, addr: &str) -> Result<RespReply, BenchError> {
    let bad = |detail: String| BenchError::Redis {
        addr: addr.to_string(),
        detail,
    };
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)
        .map_err(|e| bad(format!("reading a reply: {e}")))?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        return Err(bad(format!(
            "truncated reply {:?}",
            String::from_utf8_lossy(&line)
        )));
    }
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    match line[0] {
        b'+' => Ok(RespReply::Status(body)),
        b'-' => Ok(RespReply::Error(body)),
        b':' => body
            .parse()
            .map(RespReply::Integer)
            .map_err(|_| bad(format!("bad integer reply {body:?}"))),
        b'$' => {
            let n: i64 = body
                .parse()
                .map_err(|_| bad(format!("bad bulk length {body:?}")))?;
            if n < 0 {
                return Ok(RespReply::Bulk(None));
            }
            let n = n as usize;
            if n > MAX_BULK {
                return Err(bad(format!("bulk reply of {n} bytes is too long")));
            }
            // Read what arrives rather than trusting the length for an allocation.
            let mut buf = Vec::with_capacity(n.min(1 << 20) + 2);
            r.by_ref()
                .take(n as u64 + 2)
                .read_to_end(&mut buf)
                .map_err(|e| bad(format!("reading {n} bytes of a bulk reply: {e}")))?;
            if buf.len() != n + 2 {
                return Err(bad(format!(
                    "bulk reply of {n} bytes truncated after {}",
                    buf.len()
                )));
            }
            if &buf[n..] != b"\r\n" {
                return Err(bad("bulk reply not terminated by CRLF".into()));
            }
            buf.truncate(n);
            Ok(RespReply::Bulk(Some(buf)))
        }
        other => Err(bad(format!("unexpected reply type byte {other:#x}"))),
    }
}

/// A connection to one redis server.
pub struct RespConnection {
    addr: String,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl RespConnection {
    /// Connects to `addr` (`127.0.0.1:PORT`), every read bounded by `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, BenchError> {
        let bad = |detail: String| BenchError::Redis {
            addr: addr.to_string(),
            detail,
        };
        let s = TcpStream::connect(addr).map_err(|e| bad(format!("connect: {e}")))?;
        s.set_read_timeout(Some(timeout))
            .and_then(|_| s.set_nodelay(true))
            .map_err(|e| bad(format!("socket options: {e}")))?;
        let reader = BufReader::with_capacity(
            256 << 10,
            s.try_clone().map_err(|e| bad(format!("clone: {e}")))?,
        );
        Ok(Self {
            addr: addr.to_string(),
            writer: s,
            reader,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Writes already encoded commands.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), BenchError> {
        self.writer.write_all(bytes).map_err(|e| BenchError::Redis {
            addr: self.addr.clone(),
            detail: format!("sending: {e}"),
        })
    }

    /// Reads one reply.
    pub fn reply(&mut self) -> Result<RespReply, BenchError> {
        read_reply(&mut self.reader, &self.addr)
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, parts: &[&[u8]]) -> Result<RespReply, BenchError> {
        let mut out = Vec::new();
        encode_command(&mut out, parts);
        self.send(&out)?;
        self.reply()
    }

    /// Splits into the writing half and the reading half (for a pipelined load).
    pub fn split(self) -> (TcpStream, BufReader<TcpStream>, String) {
        (self.writer, self.reader, self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<RespReply, BenchError> {
        read_reply(&mut &bytes[..], "test")
    }

    #[test]
    fn encodes_bulk_arrays() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"GET", b"k1"]);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), RespReply::Status("OK".into()));
        assert_eq!(parse(b":42\r\n").unwrap(), RespReply::Integer(42));
        assert_eq!(
            parse(b"$3\r\nabc\r\n").unwrap(),
            RespReply::Bulk(Some(b"abc".to_vec()))
        );
        assert_eq!(parse(b"$-1\r\n").unwrap(), RespReply::Bulk(None));
        assert_eq!(
            parse(b"-ERR no\r\n").unwrap(),
            RespReply::Error("ERR no".into())
        );
    }

    #[test]
    fn refuses_malformed_replies() {
        for bad in [
            &b""[..],
            b"+OK",
            b"$5\r\nabc\r\n",
            b"$3\r\nabcXY",
            b":x\r\n",
            b"*1\r\n",
            b"$99999999999\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
