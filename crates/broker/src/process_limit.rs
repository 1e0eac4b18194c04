//! [`ProcessLimit`]: a per-process minimum and maximum (`--limit NAME=MIN:MAX`), matched
//! against a process id or its label (QEMU's `-name guest=NAME`, else the program's name).

use std::str::FromStr;

use memvisor_control::ByteSize;

use crate::broker_error::BrokerError;

/// Bounds of the budgets of the processes a selector matches.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessLimit {
    /// A pid (all digits) or a label.
    pub selector: String,
    /// Least budget, bytes.
    pub min: Option<u64>,
    /// Most budget, bytes.
    pub max: Option<u64>,
}

impl ProcessLimit {
    /// Whether this limit applies to process `pid` labelled `label`.
    pub fn matches(&self, pid: u32, label: &str) -> bool {
        self.selector == pid.to_string() || self.selector == label
    }
}

impl FromStr for ProcessLimit {
    type Err = BrokerError;

    /// `NAME=MIN:MAX`, either bound may be empty (`vm1=512M:`, `1234=:2G`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refuse = |reason: &str| BrokerError::Option {
            option: format!("--limit {s}"),
            reason: reason.to_string(),
        };
        let (selector, bounds) = s
            .split_once('=')
            .ok_or_else(|| refuse("expected NAME=MIN:MAX"))?;
        if selector.is_empty() {
            return Err(refuse("no process id or name before '='"));
        }
        let (min, max) = bounds
            .split_once(':')
            .ok_or_else(|| refuse("expected MIN:MAX after '=' (either may be empty)"))?;
        let size = |text: &str| -> Result<Option<u64>, BrokerError> {
            if text.is_empty() {
                return Ok(None);
            }
            match ByteSize::parse(text) {
                Ok(ByteSize::Bytes(b)) => Ok(Some(b)),
                Ok(ByteSize::Percent(_)) => Err(refuse("a limit is a size, not a percentage")),
                Err(e) => Err(refuse(&e.to_string())),
            }
        };
        let (min, max) = (size(min)?, size(max)?);
        if let (Some(lo), Some(hi)) = (min, max) {
            if lo > hi {
                return Err(refuse("MIN is larger than MAX"));
            }
        }
        Ok(Self {
            selector: selector.to_string(),
            min,
            max,
        })
    }
}

/// A process's label: QEMU's guest name (`-name guest=NAME,...` or `-name NAME`) from
/// `/proc/PID/cmdline`, else `program`.
pub fn process_label(pid: u32, program: &str) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    guest_name(&cmdline).unwrap_or_else(|| program.to_string())
}

/// The guest name in a NUL-separated QEMU command line.
fn guest_name(cmdline: &[u8]) -> Option<String> {
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let at = args.iter().position(|a| *a == b"-name")?;
    let value = std::str::from_utf8(args.get(at + 1)?).ok()?;
    let first = value.split(',').next()?;
    let name = first.strip_prefix("guest=").unwrap_or(first);
    // QEMU escapes a comma in the name as ",,"; a name with one is rare: take what precedes.
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_bounds_either_or_none() {
        let l: ProcessLimit = "vm1=512M:2G".parse().unwrap();
        assert_eq!((l.min, l.max), (Some(512 << 20), Some(2 << 30)));
        assert!(l.matches(7, "vm1") && !l.matches(7, "vm2"));
        let l: ProcessLimit = "1234=:1G".parse().unwrap();
        assert_eq!((l.min, l.max), (None, Some(1 << 30)));
        assert!(l.matches(1234, "qemu-system-x86_64"));
        for (bad, why) in [
            ("vm1", "expected NAME=MIN:MAX"),
            ("=1G:2G", "no process id"),
            ("vm1=1G", "expected MIN:MAX"),
            ("vm1=2G:1G", "MIN is larger"),
            ("vm1=10%:", "not a percentage"),
            ("vm1=lots:", "size 'lots'"),
        ] {
            let e = bad.parse::<ProcessLimit>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn guest_names_from_qemu_command_lines() {
        let q = b"qemu-system-x86_64\0-m\x00256\0-name\0guest=vm-a,debug-threads=on\0";
        assert_eq!(guest_name(q).as_deref(), Some("vm-a"));
        assert_eq!(
            guest_name(b"qemu\0-name\0plain\0").as_deref(),
            Some("plain")
        );
        assert_eq!(guest_name(b"redis-server\0--port\x006379\0"), None);
        assert_eq!(guest_name(b"qemu\0-name\0"), None);
        assert_eq!(process_label(u32::MAX, "prog"), "prog");
    }
}
