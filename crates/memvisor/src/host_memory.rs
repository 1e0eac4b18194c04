//! Host facts the control commands need: physical memory size.

/// `MemTotal` of `/proc/meminfo`, in bytes ([`memvisor_control::host_memory`], which the
/// control server checks budgets against too).
pub fn mem_total_bytes() -> Result<u64, String> {
    memvisor_control::host_memory::mem_total_bytes().map_err(|e| e.to_string())
}
