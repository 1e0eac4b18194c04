//! [`MetricsRequest`]: what the metrics endpoint makes of the bytes of an HTTP request head,
//! as a pure function ([`MetricsRequest::parse`]) so it can be fuzzed without a socket.

/// Longest request head read, in bytes.
pub const MAX_HEAD_BYTES: usize = 8192;

/// The request an HTTP head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsRequest {
    /// The head is not complete yet: read more.
    Incomplete,
    /// `GET /metrics` or `GET /`.
    Metrics,
    /// A `GET` of another path.
    NotFound,
    /// Another method.
    MethodNotAllowed,
    /// No request line.
    BadRequest,
    /// The head is longer than [`MAX_HEAD_BYTES`].
    TooLarge,
}

impl MetricsRequest {
    /// Reads `head`, the bytes received so far; `closed` when the peer has sent all it will.
    pub fn parse(head: &[u8], closed: bool) -> Self {
        if head.len() > MAX_HEAD_BYTES {
            return Self::TooLarge;
        }
        let complete =
            head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n");
        if !complete && !closed {
            return Self::Incomplete;
        }
        let first = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let first = String::from_utf8_lossy(first);
        let mut parts = first.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Self::BadRequest;
        };
        let path = target.split('?').next().unwrap_or("");
        match (method, path) {
            ("GET", "/metrics" | "/") => Self::Metrics,
            ("GET", _) => Self::NotFound,
            _ => Self::MethodNotAllowed,
        }
    }

    /// The HTTP status line's code and reason for anything but [`Metrics`](Self::Metrics)
    /// (which is `200 OK`) and [`Incomplete`](Self::Incomplete).
    pub fn status(self) -> &'static str {
        match self {
            Self::Incomplete | Self::Metrics => "200 OK",
            Self::NotFound => "404 Not Found",
            Self::MethodNotAllowed => "405 Method Not Allowed",
            Self::BadRequest => "400 Bad Request",
            Self::TooLarge => "431 Request Header Fields Too Large",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_heads() {
        let p = MetricsRequest::parse;
        assert_eq!(
            p(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false),
            MetricsRequest::Metrics
        );
        assert_eq!(
            p(b"GET /metrics?x=1 HTTP/1.0\n\n", false),
            MetricsRequest::Metrics
        );
        assert_eq!(p(b"GET / HTTP/1.0\r\n\r\n", false), MetricsRequest::Metrics);
        assert_eq!(
            p(b"GET /metrics HTTP/1.1\r\n", false),
            MetricsRequest::Incomplete
        );
        assert_eq!(
            p(b"GET /metrics HTTP/1.1\r\n", true),
            MetricsRequest::Metrics
        );
        assert_eq!(
            p(b"GET /nope HTTP/1.0\r\n\r\n", false),
            MetricsRequest::NotFound
        );
        assert_eq!(
            p(b"POST /metrics HTTP/1.0\r\n\r\n", false),
            MetricsRequest::MethodNotAllowed
        );
        assert_eq!(p(b"\r\n\r\n", false), MetricsRequest::BadRequest);
        assert_eq!(p(b"", true), MetricsRequest::BadRequest);
        assert_eq!(
            p(&[b'a'; MAX_HEAD_BYTES + 1], false),
            MetricsRequest::TooLarge
        );
        assert_eq!(
            MetricsRequest::TooLarge.status(),
            "431 Request Header Fields Too Large"
        );
    }
}
