//! Host facts the control commands need: physical memory size.

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total_bytes() -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| "no MemTotal line in /proc/meminfo".to_string())
}
