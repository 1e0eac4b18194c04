//! The C API: error handling from Rust, and a C program built against `memvisor.h` and the
//! static library.

mod common;

use std::ffi::CStr;
use std::path::Path;
use std::process::Command;

use common::supported;
use memvisor_pager::ffi::{
    memvisor_region_free, memvisor_region_get_stats, memvisor_region_len, memvisor_region_new,
    memvisor_region_ptr, MemvisorRegionConfig, MemvisorRegionStats,
};

#[test]
fn c_api_from_rust() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cdir = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
    let mut err = [0 as std::ffi::c_char; 128];
    let mut cfg = MemvisorRegionConfig {
        size: 4 << 20,
        budget: 1 << 20,
        chunk_size: 0,
        swap_dir: cdir.as_ptr(),
        policy: std::ptr::null(),
        resolve: 7,
        sample_interval_ms: -1,
        dirty_tracking: -1,
    };
    // SAFETY: valid config and error buffer.
    let r = unsafe { memvisor_region_new(&cfg, err.as_mut_ptr(), err.len()) };
    assert!(r.is_null());
    // SAFETY: the function NUL-terminated the buffer.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains("resolve mode 7"), "{msg}");
    cfg.resolve = 1;
    // SAFETY: valid config and error buffer.
    let r = unsafe { memvisor_region_new(&cfg, err.as_mut_ptr(), err.len()) };
    assert!(!r.is_null());
    // SAFETY: `r` is live; the memory is `len` bytes; single thread.
    unsafe {
        let p = memvisor_region_ptr(r).cast::<u8>();
        let len = memvisor_region_len(r) as usize;
        assert_eq!(len, 4 << 20);
        // Every page: the budget (one chunk) is exceeded whatever each page-in reads.
        for i in (0..len).step_by(4096) {
            p.add(i).write(9);
        }
        for i in (0..len).step_by(4096) {
            assert_eq!(p.add(i).read(), 9);
        }
        let mut s = MemvisorRegionStats::default();
        assert_eq!(memvisor_region_get_stats(r, &mut s), 0);
        assert!(s.page_outs >= 3 && s.resident_chunks == 1, "{s:?}");
        assert_eq!(memvisor_region_get_stats(r, std::ptr::null_mut()), -1);
        memvisor_region_free(r);
        memvisor_region_free(std::ptr::null_mut());
    }
}

#[test]
fn c_program_against_the_header() {
    if !supported() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/c_api-HASH -> target/<profile>/libmemvisor_pager.a
    let lib_dir = exe.parent().and_then(Path::parent).unwrap();
    let lib = lib_dir.join("libmemvisor_pager.a");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler ({cc})");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `cargo test` builds the library as an rlib only: build the static library (same profile,
    // same target directory) so the C program links against the current code. Every member's
    // library, as `cargo test --workspace` unifies their features: this package alone unifies
    // them differently and recompiled its dependencies (30 s in a fresh checkout).
    let profile = lib_dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut build = Command::new(env!("CARGO"));
    build
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--lib",
            "--manifest-path",
        ])
        .arg(manifest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(lib_dir.parent().unwrap());
    if profile == "release" {
        build.arg("--release");
    } else if profile != "debug" {
        build.args(["--profile", &profile]);
    }
    assert!(
        build.status().unwrap().success(),
        "cargo build --lib failed"
    );
    assert!(lib.exists(), "{} missing", lib.display());
    let out_dir = tempfile::tempdir().unwrap();
    let bin = out_dir.path().join("smoke");
    let status = Command::new(&cc)
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/smoke.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .status()
        .unwrap();
    assert!(status.success(), "cc failed");
    let out = Command::new(&bin).arg(out_dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("C API OK"));
}
