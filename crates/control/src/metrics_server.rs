//! [`MetricsServer`]: a minimal HTTP/1.0 server answering `GET /metrics` with Prometheus text,
//! on loopback unless told otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::control_error::ControlError;

/// Longest request head read.
const MAX_HEAD: usize = 8192;

/// A bound metrics listener.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
}

/// Parses a metrics address: `PORT`, `:PORT`, `HOST:PORT` or `[V6]:PORT`. Unless
/// `allow_remote`, every address it resolves to must be loopback.
pub fn parse_metrics_addr(addr: &str, allow_remote: bool) -> Result<Vec<SocketAddr>, ControlError> {
    let bad = |reason: String| ControlError::MetricsAddress {
        addr: addr.to_string(),
        reason,
    };
    let text = if addr.parse::<u16>().is_ok() {
        format!("127.0.0.1:{addr}")
    } else if let Some(port) = addr.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else {
        addr.to_string()
    };
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| bad(format!("expected PORT or HOST:PORT ({e})")))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("resolves to no address".into()));
    }
    if !allow_remote {
        if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(bad(format!(
                "{} is not a loopback address (pass --metrics-allow-remote to expose metrics beyond this host)",
                a.ip()
            )));
        }
    }
    Ok(addrs)
}

impl MetricsServer {
    /// Binds the first address of [`parse_metrics_addr`] that binds.
    pub fn bind(addr: &str, allow_remote: bool) -> Result<Self, ControlError> {
        let addrs = parse_metrics_addr(addr, allow_remote)?;
        let listener = TcpListener::bind(&addrs[..]).map_err(|e| ControlError::MetricsAddress {
            addr: addr.to_string(),
            reason: format!("bind: {e}"),
        })?;
        Ok(Self { listener })
    }

    /// The bound address (with the real port when 0 was asked).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves on a new thread; `render` produces the body of each scrape.
    pub fn serve(
        self,
        render: impl Fn() -> String + Send + 'static,
    ) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("memvisor-metrics".into())
            .spawn(move || {
                for stream in self.listener.incoming().flatten() {
                    let _ = answer(stream, &render);
                }
            })
    }
}

/// Reads the request head and answers it.
fn answer(mut stream: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
    }
    let first = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let first = String::from_utf8_lossy(first);
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path) {
        ("GET", "/metrics") | ("GET", "/") => respond(
            &mut stream,
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &render(),
        ),
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "not found\n"),
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", ""),
    }
}

fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(msg.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only_by_default() {
        assert!(parse_metrics_addr("9100", false).unwrap()[0]
            .ip()
            .is_loopback());
        assert!(parse_metrics_addr(":9100", false).is_ok());
        assert!(parse_metrics_addr("[::1]:9100", false).is_ok());
        assert!(parse_metrics_addr("0.0.0.0:9100", false).is_err());
        assert!(parse_metrics_addr("0.0.0.0:9100", true).is_ok());
        assert!(parse_metrics_addr("nonsense", false).is_err());
        assert!(parse_metrics_addr("127.0.0.1:99999", false).is_err());
    }

    #[test]
    fn serves_metrics_over_http() {
        let s = MetricsServer::bind("127.0.0.1:0", false).unwrap();
        let addr = s.local_addr().unwrap();
        s.serve(|| "m 1\n".to_string()).unwrap();
        let get = |req: &str| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.0 200 OK"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nm 1\n"));
        assert!(get("GET /nope HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 404"));
        assert!(get("POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 405"));
    }
}
