//! The metrics endpoint against slow and numerous clients: a scrape is answered while another
//! client dribbles its request, a dribbling client is dropped at the request deadline, and
//! connections over the per-address limit get `503`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use memvisor_control::{MetricsServer, MAX_CONNECTIONS};

fn serve() -> SocketAddr {
    let server = MetricsServer::bind("127.0.0.1:0", false).unwrap();
    let addr = server.local_addr().unwrap();
    server.serve(|| "m 1\n".to_string()).unwrap();
    addr
}

fn scrape(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

/// Sends the start of a request a byte at a time, every `every`, for at most `for_at_most`;
/// returns how long until the server closed the connection, if it did.
fn dribble(
    addr: SocketAddr,
    every: Duration,
    for_at_most: Duration,
) -> std::thread::JoinHandle<Option<Duration>> {
    let mut c = TcpStream::connect(addr).unwrap();
    std::thread::spawn(move || {
        let start = Instant::now();
        c.set_read_timeout(Some(every)).unwrap();
        let mut buf = [0u8; 256];
        for &b in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if start.elapsed() > for_at_most {
                return None;
            }
            if c.write_all(&[b]).is_err() {
                return Some(start.elapsed());
            }
            // A closed connection shows as end of stream (or a reset) here.
            match c.read(&mut buf) {
                Ok(0) => return Some(start.elapsed()),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Some(start.elapsed())
                }
                _ => {}
            }
        }
        None
    })
}

#[test]
fn a_scrape_is_answered_while_a_slow_client_is_connected() {
    let addr = serve();
    let _slow = dribble(addr, Duration::from_millis(500), Duration::from_secs(4));
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let answer = scrape(addr);
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nm 1\n"), "{answer}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_dribbling_client_is_dropped_at_the_deadline() {
    let addr = serve();
    let closed = dribble(addr, Duration::from_secs(1), Duration::from_secs(15))
        .join()
        .unwrap();
    let closed = closed.expect("the server kept a client sending a byte a second for 15 s");
    assert!(closed < Duration::from_secs(8), "{closed:?}");
}

#[test]
fn connections_over_the_limit_get_503() {
    let addr = serve();
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let answer = scrape(addr);
    assert!(answer.starts_with("HTTP/1.0 503"), "{answer}");
    assert!(answer.contains("busy"), "{answer}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    assert!(scrape(addr).starts_with("HTTP/1.0 200 OK"));
}
