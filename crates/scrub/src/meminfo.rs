//! [`MemInfo`]: host memory totals from `/proc/meminfo`, the inputs of the scrubbing
//! frequency control.

use std::path::Path;

use crate::ScrubError;

/// Host memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `Cached` (page cache, incl. shmem).
    pub cached: u64,
    /// `Dirty`.
    pub dirty: u64,
}

impl MemInfo {
    /// Reads `/proc/meminfo`.
    pub fn read() -> Result<Self, ScrubError> {
        let path = Path::new("/proc/meminfo");
        let text =
            std::fs::read_to_string(path).map_err(|e| ScrubError::file(path, "reading", e))?;
        Self::parse(&text).map_err(|(line, message)| ScrubError::Parse {
            path: path.into(),
            line,
            message,
        })
    }

    /// Parses `Key:   123 kB` lines; `MemTotal`, `MemFree` and `Cached` are required, unknown
    /// keys ignored. `Err((line, message))` (line 0: a key is missing).
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut m = Self::default();
        let mut seen = [false; 3];
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (key, rest) = line
                .split_once(':')
                .ok_or_else(|| (i + 1, "expected 'Key: value'".to_string()))?;
            let slot = match key {
                "MemTotal" => Some((0, &mut m.total)),
                "MemFree" => Some((1, &mut m.free)),
                "Cached" => Some((2, &mut m.cached)),
                "Dirty" => Some((3, &mut m.dirty)),
                _ => None,
            };
            let Some((k, field)) = slot else { continue };
            let mut words = rest.split_whitespace();
            let n: u64 = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| (i + 1, format!("{key}: expected a number")))?;
            let scale = match words.next() {
                None => 1,
                Some("kB") => 1024,
                Some(u) => return Err((i + 1, format!("{key}: unknown unit {u:?}"))),
            };
            *field = n
                .checked_mul(scale)
                .ok_or_else(|| (i + 1, format!("{key}: {n} {scale} overflows")))?;
            if k < 3 {
                seen[k] = true;
            }
        }
        for (k, name) in ["MemTotal", "MemFree", "Cached"].iter().enumerate() {
            if !seen[k] {
                return Err((0, format!("{name} missing")));
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let m = MemInfo::parse(
            "MemTotal:       24576000 kB\nMemFree:        1000 kB\nMemAvailable: 5 kB\nCached:  2 kB\nDirty: 1 kB\nHugePages_Total:       0\n",
        )
        .unwrap();
        assert_eq!(m.total, 24_576_000 * 1024);
        assert_eq!((m.free, m.cached, m.dirty), (1_024_000, 2048, 1024));
        assert_eq!(MemInfo::parse("MemTotal: 1 kB\n").unwrap_err().0, 0);
        assert_eq!(MemInfo::parse("MemTotal 1\n").unwrap_err().0, 1);
        assert!(MemInfo::parse("MemTotal: x kB")
            .unwrap_err()
            .1
            .contains("number"));
        assert!(MemInfo::parse("MemTotal: 1 MB")
            .unwrap_err()
            .1
            .contains("unit"));
        assert!(MemInfo::parse("MemTotal: 99999999999999999999 kB").is_err());
        assert!(MemInfo::read().unwrap().total > 0);
    }
}
