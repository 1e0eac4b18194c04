//! Helpers shared by the bench's integration tests: whether a test that needs a prerequisite
//! (QEMU, root, redis-server, cgroup v1) is skipped here, or fails because CI must have it.

#![allow(dead_code)]

/// Whether the tests run under CI (`CI=true` or `CI=1`), where `scripts/install` provides every
/// prerequisite and a missing one fails the test instead of skipping it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Why QEMU cannot be run as root here (`root_for` says what root is needed for), if it cannot.
pub fn qemu_as_root_missing(root_for: &str) -> Option<String> {
    if let Err(e) = memvisor_testvm::qemu_binary() {
        return Some(e.to_string());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(format!("not root ({root_for})"));
    }
    None
}

/// Whether `test` is skipped because of `missing` (a prerequisite absent, and why): prints
/// SKIPPED; under CI it fails instead.
pub fn skip(test: &str, missing: Option<String>) -> bool {
    let Some(why) = missing else {
        return false;
    };
    if in_ci() {
        panic!("CI=true: {test} cannot run: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    true
}
