//! [`MetricsServer`]: a minimal HTTP/1.0 server answering `GET /metrics` with Prometheus text,
//! on loopback unless told otherwise. Connections are served concurrently, each within one
//! deadline, so a slow client holds only its own connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::connection_limits::{ConnectionLimits, Refusal};
use crate::control_error::ControlError;
use crate::deadline_stream::DeadlineStream;
use crate::http_request::MetricsRequest;

/// Time a client has to send its request head and read the answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Time the answer gets to go out after a slow render.
const WRITE_TIME: Duration = Duration::from_secs(2);
/// Time a `503` answer gets to go out.
const BUSY_ANSWER_TIME: Duration = Duration::from_millis(500);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Connections served at once from one client address.
pub const MAX_CONNECTIONS_PER_IP: usize = 4;

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

    /// Serves on a new thread, each connection on a thread of its own (at most
    /// [`MAX_CONNECTIONS`], [`MAX_CONNECTIONS_PER_IP`] per client address; more get `503`);
    /// `render` produces the body of each scrape.
    pub fn serve(
        self,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> std::io::Result<JoinHandle<()>> {
        let render: Arc<dyn Fn() -> String + Send + Sync> = Arc::new(render);
        std::thread::Builder::new()
            .name("memvisor-metrics".into())
            .spawn(move || {
                let limits = ConnectionLimits::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP);
                for stream in self.listener.incoming().flatten() {
                    let Ok(peer) = stream.peer_addr() else {
                        continue;
                    };
                    let slot = match limits.try_open(peer.ip()) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            answer_busy(stream, refusal);
                            continue;
                        }
                    };
                    let render = render.clone();
                    let _ = std::thread::Builder::new()
                        .name("memvisor-metrics-client".into())
                        .spawn(move || {
                            let _ = answer(stream, render.as_ref());
                            drop(slot);
                        });
                }
            })
    }
}

/// Refuses a connection over the limits with `503` (after taking what it already sent, so
/// that closing does not reset the connection before the answer is read).
fn answer_busy(stream: TcpStream, refusal: Refusal) {
    let mut stream = DeadlineStream::new(stream, BUSY_ANSWER_TIME);
    if stream.socket().set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        let _ = stream.socket().read(&mut sink);
        let _ = stream.socket().set_nonblocking(false);
    }
    let _ = respond(
        &mut stream,
        "503 Service Unavailable",
        "text/plain",
        &format!("busy: {refusal}; try again\n"),
    );
}

/// Reads the request head and answers it, all within [`REQUEST_DEADLINE`].
fn answer(stream: TcpStream, render: &(dyn Fn() -> String + Send + Sync)) -> std::io::Result<()> {
    let mut stream = DeadlineStream::new(stream, REQUEST_DEADLINE);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let request = loop {
        let n = stream.read(&mut buf)?;
        head.extend_from_slice(&buf[..n]);
        match MetricsRequest::parse(&head, n == 0) {
            MetricsRequest::Incomplete => continue,
            request => break request,
        }
    };
    match request {
        MetricsRequest::Metrics => {
            let body = render();
            // Rendering asks the managed process; the answer still gets its time to go out.
            stream.extend_to_at_least(WRITE_TIME);
            respond(
                &mut stream,
                request.status(),
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        MetricsRequest::NotFound => {
            respond(&mut stream, request.status(), "text/plain", "not found\n")
        }
        _ => respond(&mut stream, request.status(), "text/plain", ""),
    }
}

fn respond(stream: &mut impl Write, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
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
