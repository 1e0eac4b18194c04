//! [`MigrateRules`]: what a request to start a live migration must satisfy, checked by
//! `memvisor migrate` before asking and by the control server before its handler sees it.

use std::net::SocketAddr;
use std::path::Path;

use crate::control_error::ControlError;

/// Longest downtime limit accepted (a minute: more is not live migration).
pub const MAX_DOWNTIME_LIMIT_MS: u64 = 60_000;
/// Smallest bandwidth limit accepted, bytes per second.
pub const MIN_BANDWIDTH: u64 = 1 << 20;

/// The checks of a `migrate` request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrateRules;

impl MigrateRules {
    /// Checks the destination address (`HOST:PORT` with a numeric IP, as the destination's
    /// `--migration-listen` takes it), the key file path (absolute), the bandwidth limit
    /// (at least 1 MiB/s) and the downtime limit (1 ms to a minute). Returns the address.
    pub fn check(
        &self,
        to: &str,
        key_file: &str,
        max_bandwidth: Option<u64>,
        downtime_limit_ms: u64,
    ) -> Result<SocketAddr, ControlError> {
        let refuse = |what: &str, reason: String| {
            Err(ControlError::Migrate {
                what: what.to_string(),
                reason,
            })
        };
        let addr: SocketAddr = match to.parse() {
            Ok(a) => a,
            Err(_) => {
                return refuse(
                    "destination",
                    format!("'{to}' is not IP:PORT (for example 192.0.2.7:7070)"),
                )
            }
        };
        if addr.port() == 0 {
            return refuse("destination", format!("'{to}' has port 0"));
        }
        if !Path::new(key_file).is_absolute() {
            return refuse(
                "key file",
                format!("'{key_file}' is not an absolute path (the process resolves it)"),
            );
        }
        if let Some(b) = max_bandwidth {
            if b < MIN_BANDWIDTH {
                return refuse(
                    "bandwidth limit",
                    format!("{b} bytes/s is less than {MIN_BANDWIDTH} (1 MiB/s)"),
                );
            }
        }
        if downtime_limit_ms == 0 || downtime_limit_ms > MAX_DOWNTIME_LIMIT_MS {
            return refuse(
                "downtime limit",
                format!("{downtime_limit_ms} ms is not between 1 and {MAX_DOWNTIME_LIMIT_MS}"),
            );
        }
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_requests_pass_and_bad_ones_name_the_part() {
        let r = MigrateRules;
        assert_eq!(
            r.check("127.0.0.1:7070", "/etc/k", None, 300).unwrap(),
            "127.0.0.1:7070".parse().unwrap()
        );
        assert!(r.check("[::1]:7", "/k", Some(1 << 30), 1).is_ok());
        for (to, key, bw, dt, part) in [
            ("host:7070", "/k", None, 300, "destination"),
            ("127.0.0.1:0", "/k", None, 300, "port 0"),
            ("127.0.0.1:7070", "k", None, 300, "absolute"),
            ("127.0.0.1:7070", "/k", Some(1000), 300, "bandwidth"),
            ("127.0.0.1:7070", "/k", None, 0, "downtime"),
            ("127.0.0.1:7070", "/k", None, 60_001, "downtime"),
        ] {
            let e = r.check(to, key, bw, dt).unwrap_err().to_string();
            assert!(e.contains(part), "{to} {key} {bw:?} {dt}: {e}");
        }
    }
}
