//! The C API (`include/memvisor.h`): create a region, get its memory and statistics, free it.
//!
//! Every function takes plain C types; errors come back as a null pointer or a negative
//! return value with a NUL-terminated message written to a caller-supplied buffer.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::PathBuf;
use std::time::Duration;

use crate::region::Region;
use crate::region_config::{RegionConfig, ResolveMode};

/// `memvisor_region_config` in `memvisor.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemvisorRegionConfig {
    /// Bytes of memory.
    pub size: u64,
    /// Resident budget in bytes.
    pub budget: u64,
    /// Chunk size in bytes; 0 for the default (1 MiB).
    pub chunk_size: u64,
    /// Swap directory (NUL-terminated); must not be null.
    pub swap_dir: *const c_char,
    /// Policy spelling such as `"clock"` or `"chunk-queues:m=8"`; null for the default.
    pub policy: *const c_char,
    /// 0: `UFFDIO_COPY`; 1: alias + `UFFDIO_CONTINUE`.
    pub resolve: u32,
    /// Access sampling period in ms: negative for the default, 0 to disable.
    pub sample_interval_ms: i64,
    /// Dirty tracking: negative for the default (on), 0 off, positive on.
    pub dirty_tracking: i32,
}

/// `memvisor_region_stats` in `memvisor.h` (all counters of [`RegionStats`](crate::RegionStats)).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MemvisorRegionStats {
    /// See [`RegionStats`](crate::RegionStats) for each field.
    pub chunks: u64,
    #[allow(missing_docs)]
    pub resident_chunks: u64,
    #[allow(missing_docs)]
    pub swapped_chunks: u64,
    #[allow(missing_docs)]
    pub zero_chunks: u64,
    #[allow(missing_docs)]
    pub poisoned_chunks: u64,
    #[allow(missing_docs)]
    pub overrun_chunks: u64,
    #[allow(missing_docs)]
    pub missing_faults: u64,
    #[allow(missing_docs)]
    pub minor_faults: u64,
    #[allow(missing_docs)]
    pub page_ins: u64,
    #[allow(missing_docs)]
    pub page_outs: u64,
    #[allow(missing_docs)]
    pub bytes_read: u64,
    #[allow(missing_docs)]
    pub bytes_written: u64,
    #[allow(missing_docs)]
    pub clean_evictions: u64,
    #[allow(missing_docs)]
    pub write_errors: u64,
    #[allow(missing_docs)]
    pub read_errors: u64,
    #[allow(missing_docs)]
    pub page_in_p50_nanos: u64,
    #[allow(missing_docs)]
    pub page_in_p99_nanos: u64,
    #[allow(missing_docs)]
    pub page_in_max_nanos: u64,
}

/// Copies `msg` into the caller's buffer, truncated and NUL-terminated.
///
/// # Safety
/// `buf` is null or points to `len` writable bytes.
unsafe fn set_error(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller guarantees `len` writable bytes at `buf`; `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// Reads a config from C.
///
/// # Safety
/// `cfg` points to a valid config whose string pointers are null or NUL-terminated.
unsafe fn config_from_c(cfg: &MemvisorRegionConfig) -> Result<RegionConfig, String> {
    if cfg.swap_dir.is_null() {
        return Err("swap_dir is null".into());
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    let dir = unsafe { CStr::from_ptr(cfg.swap_dir) };
    let dir = PathBuf::from(dir.to_str().map_err(|e| format!("swap_dir: {e}"))?);
    let size = usize::try_from(cfg.size).map_err(|e| format!("size: {e}"))?;
    let budget = usize::try_from(cfg.budget).map_err(|e| format!("budget: {e}"))?;
    let mut c = RegionConfig::new(size, budget, dir).name("c");
    if cfg.chunk_size != 0 {
        c = c.chunk_size(usize::try_from(cfg.chunk_size).map_err(|e| format!("chunk: {e}"))?);
    }
    if !cfg.policy.is_null() {
        // SAFETY: non-null and NUL-terminated per the caller's contract.
        let p = unsafe { CStr::from_ptr(cfg.policy) };
        let p = p.to_str().map_err(|e| format!("policy: {e}"))?;
        c = c.policy(p.parse().map_err(|e| format!("policy: {e}"))?);
    }
    c = c.resolve(match cfg.resolve {
        0 => ResolveMode::Copy,
        1 => ResolveMode::AliasContinue,
        r => return Err(format!("resolve mode {r} is neither 0 nor 1")),
    });
    if cfg.sample_interval_ms >= 0 {
        c = c.sample_interval(
            (cfg.sample_interval_ms > 0)
                .then(|| Duration::from_millis(cfg.sample_interval_ms as u64)),
        );
    }
    if cfg.dirty_tracking >= 0 {
        c = c.dirty_tracking(cfg.dirty_tracking > 0);
    }
    Ok(c)
}

/// Creates a region; returns null on failure, with a message in `err` (if not null).
///
/// # Safety
/// `cfg` points to a valid `memvisor_region_config` whose strings are null or NUL-terminated;
/// `err` is null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_new(
    cfg: *const MemvisorRegionConfig,
    err: *mut c_char,
    err_len: usize,
) -> *mut Region {
    if cfg.is_null() {
        // SAFETY: forwarded caller contract on `err`.
        unsafe { set_error(err, err_len, "config is null") };
        return std::ptr::null_mut();
    }
    // SAFETY: `cfg` is non-null and valid per the caller's contract.
    let parsed = unsafe { config_from_c(&*cfg) };
    let result = parsed.and_then(|c| Region::new(c).map_err(|e| e.to_string()));
    match result {
        Ok(r) => Box::into_raw(Box::new(r)),
        Err(msg) => {
            // SAFETY: forwarded caller contract on `err`.
            unsafe { set_error(err, err_len, &msg) };
            std::ptr::null_mut()
        }
    }
}

/// The region's memory (valid for `memvisor_region_len` bytes until the region is freed).
///
/// # Safety
/// `r` is a live region from `memvisor_region_new`.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_ptr(r: *const Region) -> *mut c_void {
    // SAFETY: live region per the caller's contract.
    match unsafe { r.as_ref() } {
        Some(r) => r.as_ptr().cast(),
        None => std::ptr::null_mut(),
    }
}

/// The region's size in bytes.
///
/// # Safety
/// `r` is a live region from `memvisor_region_new`.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_len(r: *const Region) -> u64 {
    // SAFETY: live region per the caller's contract.
    unsafe { r.as_ref() }.map_or(0, |r| r.len() as u64)
}

/// Fills `out` with the region's counters; returns 0, or -1 if an argument is null.
///
/// # Safety
/// `r` is a live region from `memvisor_region_new`; `out` points to a writable
/// `memvisor_region_stats`.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_get_stats(
    r: *const Region,
    out: *mut MemvisorRegionStats,
) -> c_int {
    // SAFETY: live region per the caller's contract.
    let Some(r) = (unsafe { r.as_ref() }) else {
        return -1;
    };
    if out.is_null() {
        return -1;
    }
    let s = r.stats();
    let c = MemvisorRegionStats {
        chunks: s.chunks,
        resident_chunks: s.resident_chunks,
        swapped_chunks: s.swapped_chunks,
        zero_chunks: s.zero_chunks,
        poisoned_chunks: s.poisoned_chunks,
        overrun_chunks: s.overrun_chunks,
        missing_faults: s.missing_faults,
        minor_faults: s.minor_faults,
        page_ins: s.page_ins,
        page_outs: s.page_outs,
        bytes_read: s.bytes_read,
        bytes_written: s.bytes_written,
        clean_evictions: s.clean_evictions,
        write_errors: s.write_errors,
        read_errors: s.read_errors,
        page_in_p50_nanos: s.page_in_p50_nanos,
        page_in_p99_nanos: s.page_in_p99_nanos,
        page_in_max_nanos: s.page_in_max_nanos,
    };
    // SAFETY: `out` is non-null and writable per the caller's contract.
    unsafe { out.write(c) };
    0
}

/// Runs `f` on the live region `r`, turning errors into -1 and a message in `err`.
///
/// # Safety
/// `r` is null or a live region; `err` is null or points to `err_len` writable bytes.
unsafe fn control(
    r: *const Region,
    err: *mut c_char,
    err_len: usize,
    f: impl FnOnce(&Region) -> Result<(), String>,
) -> c_int {
    // SAFETY: live region per the caller's contract.
    let result = match unsafe { r.as_ref() } {
        Some(r) => f(r),
        None => Err("region is null".into()),
    };
    match result {
        Ok(()) => 0,
        Err(msg) => {
            // SAFETY: forwarded caller contract on `err`.
            unsafe { set_error(err, err_len, &msg) };
            -1
        }
    }
}

/// Sets the resident budget in bytes at run time; returns 0, or -1 with a message in `err`.
///
/// # Safety
/// `r` is a live region; `err` is null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_set_budget(
    r: *const Region,
    budget: u64,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        control(r, err, err_len, |r| {
            r.set_budget(budget as usize).map_err(|e| e.to_string())
        })
    }
}

/// Replaces the eviction policy at run time (e.g. `"clock"`); returns 0, or -1 with a message.
///
/// # Safety
/// `r` is a live region; `policy` is a NUL-terminated string; `err` is null or points to
/// `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_set_policy(
    r: *const Region,
    policy: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    let spec = if policy.is_null() {
        None
    } else {
        // SAFETY: non-null and NUL-terminated per the caller's contract.
        unsafe { CStr::from_ptr(policy) }.to_str().ok()
    };
    // SAFETY: forwarded caller contract.
    unsafe {
        control(r, err, err_len, |r| {
            let spec = spec.ok_or("policy is null or not UTF-8")?;
            let spec = spec.parse().map_err(|e| format!("policy {spec:?}: {e}"))?;
            r.set_policy(spec).map_err(|e| e.to_string())
        })
    }
}

/// Makes `[offset, offset + len)` read as zeros (whole chunks leave memory and swap; a poisoned
/// chunk covered whole is usable again); returns 0, or -1 with a message in `err`.
///
/// # Safety
/// `r` is a live region; `err` is null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_discard(
    r: *const Region,
    offset: u64,
    len: u64,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    // SAFETY: forwarded caller contract.
    unsafe {
        control(r, err, err_len, |r| {
            r.discard(offset as usize, len as usize)
                .map_err(|e| e.to_string())
        })
    }
}

/// Stops the region's handler, unmaps its memory and deletes its swap file. Null is ignored.
///
/// # Safety
/// `r` is null or a region from `memvisor_region_new` not yet freed; no thread uses its
/// memory any more.
#[no_mangle]
pub unsafe extern "C" fn memvisor_region_free(r: *mut Region) {
    if !r.is_null() {
        // SAFETY: `r` came from `Box::into_raw` in `memvisor_region_new` and is freed once.
        drop(unsafe { Box::from_raw(r) });
    }
}
