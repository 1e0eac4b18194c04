//! Host facts the control plane needs: physical memory size (`MemTotal`).

use crate::control_error::ControlError;

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total_bytes() -> Result<u64, ControlError> {
    let text = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| ControlError::Host(format!("cannot read /proc/meminfo: {e}")))?;
    parse_mem_total(&text)
        .ok_or_else(|| ControlError::Host("no MemTotal line in /proc/meminfo".into()))
}

/// The `MemTotal:` line of meminfo text, in bytes.
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .and_then(|kib| kib.checked_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_total() {
        assert_eq!(
            parse_mem_total("MemFree: 1 kB\nMemTotal:  2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert!(mem_total_bytes().unwrap() > 0);
    }
}
