//! [`QmpAddress`]: where a QEMU's QMP socket is, as given on a command line: `unix:PATH`,
//! `tcp:HOST:PORT`, or a bare path.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::qmp_error::QmpError;

/// A QMP socket address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QmpAddress {
    /// A Unix socket (`-qmp unix:PATH,server=on,wait=off`).
    Unix(PathBuf),
    /// A TCP socket, `HOST:PORT` (`-qmp tcp:HOST:PORT,server=on,wait=off`); an IPv6 host is
    /// bracketed (`[::1]:4444`).
    Tcp(String),
}

impl FromStr for QmpAddress {
    type Err = QmpError;

    /// Parses `unix:PATH`, `tcp:HOST:PORT`, or a bare path (a Unix socket). Text that starts
    /// like another scheme (`vsock:...`, `fd:...`: lowercase letters or digits, then `:`, and
    /// no `/` anywhere) is refused rather than taken for a path; write `./name` or
    /// `unix:name` for such a path.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason: &str| QmpError::Address {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = text.strip_prefix("unix:") {
            return unix_path(path).map_err(error);
        }
        if let Some(host_port) = text.strip_prefix("tcp:") {
            return tcp_host_port(host_port).map_err(error);
        }
        if let Some((scheme, _)) = text.split_once(':') {
            let scheme_like = !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
            if scheme_like && !text.contains('/') {
                return Err(error(&format!(
                    "unsupported scheme '{scheme}' (use unix:PATH or tcp:HOST:PORT)"
                )));
            }
        }
        unix_path(text).map_err(error)
    }
}

/// A Unix socket path: non-empty, without NUL bytes.
fn unix_path(path: &str) -> Result<QmpAddress, &'static str> {
    if path.is_empty() {
        return Err("empty socket path");
    }
    if path.contains('\0') {
        return Err("socket path contains a NUL byte");
    }
    Ok(QmpAddress::Unix(PathBuf::from(path)))
}

/// `HOST:PORT`: a non-empty host (bracketed if it holds a `:`), a decimal port 1..=65535.
fn tcp_host_port(host_port: &str) -> Result<QmpAddress, &'static str> {
    let Some((host, port)) = host_port.rsplit_once(':') else {
        return Err("expected tcp:HOST:PORT");
    };
    if host.is_empty() {
        return Err("empty host (expected tcp:HOST:PORT)");
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err("an IPv6 host must be bracketed, as in tcp:[::1]:4444");
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("host contains whitespace or control characters");
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("port is not a decimal number");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err("port out of range 1..=65535"),
        Ok(_) => Ok(QmpAddress::Tcp(host_port.to_string())),
    }
}

impl fmt::Display for QmpAddress {
    /// `unix:PATH` or `tcp:HOST:PORT`, which parses back to the same address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QmpAddress::Unix(path) => write!(f, "unix:{}", path.display()),
            QmpAddress::Tcp(host_port) => write!(f, "tcp:{host_port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<QmpAddress, String> {
        text.parse::<QmpAddress>().map_err(|e| e.to_string())
    }

    #[test]
    fn parses_unix_tcp_and_bare_paths() {
        assert_eq!(
            parse("unix:/run/q.sock"),
            Ok(QmpAddress::Unix("/run/q.sock".into()))
        );
        assert_eq!(
            parse("/run/q.sock"),
            Ok(QmpAddress::Unix("/run/q.sock".into()))
        );
        assert_eq!(parse("q.sock"), Ok(QmpAddress::Unix("q.sock".into())));
        assert_eq!(parse("./a:b"), Ok(QmpAddress::Unix("./a:b".into())));
        assert_eq!(
            parse("unix:vsock:1"),
            Ok(QmpAddress::Unix("vsock:1".into()))
        );
        assert_eq!(
            parse("tcp:127.0.0.1:4444"),
            Ok(QmpAddress::Tcp("127.0.0.1:4444".into()))
        );
        assert_eq!(
            parse("tcp:localhost:1"),
            Ok(QmpAddress::Tcp("localhost:1".into()))
        );
        assert_eq!(
            parse("tcp:[::1]:65535"),
            Ok(QmpAddress::Tcp("[::1]:65535".into()))
        );
    }

    #[test]
    fn errors_name_the_text_and_the_problem() {
        for (text, reason) in [
            ("", "empty socket path"),
            ("unix:", "empty socket path"),
            ("tcp:", "expected tcp:HOST:PORT"),
            ("tcp:host", "expected tcp:HOST:PORT"),
            ("tcp::4444", "empty host"),
            ("tcp:::1:4444", "bracketed"),
            ("tcp:h:", "not a decimal"),
            ("tcp:h:+80", "not a decimal"),
            ("tcp:h:0", "out of range"),
            ("tcp:h:65536", "out of range"),
            ("tcp:h h:1", "whitespace"),
            ("vsock:2:1234", "unsupported scheme 'vsock'"),
            ("a\0b", "NUL"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(&format!("'{text}'")), "{e}");
            assert!(e.contains(reason), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "unix:/run/q.sock",
            "/x",
            "rel",
            "unix:unix:x",
            "tcp:127.0.0.1:4444",
            "tcp:[::1]:1",
        ] {
            let a = parse(text).unwrap();
            let shown = a.to_string();
            assert!(shown.starts_with("unix:") || shown.starts_with("tcp:"));
            assert_eq!(parse(&shown), Ok(a));
        }
        assert_eq!(
            QmpAddress::Unix("/s".into()).to_string(),
            "unix:/s".to_string()
        );
    }
}
