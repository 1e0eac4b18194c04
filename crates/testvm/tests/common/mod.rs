//! Shared by the guest tests: find QEMU and the guest image, or skip outside CI.

use memvisor_testvm::{qemu_binary, GuestImage, TestVmError};

/// The guest image, built if needed. Returns `None` (after printing SKIPPED) when QEMU is not
/// installed and `CI` is not `true`; under CI a missing QEMU fails the test, since
/// scripts/install provides it.
pub fn image_or_skip(test: &str) -> Option<GuestImage> {
    match qemu_binary() {
        Ok(_) => {}
        Err(e @ TestVmError::QemuNotFound { .. }) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{test}: {e} (CI=true: scripts/install must provide QEMU)");
            }
            eprintln!("SKIPPED {test}: {e}");
            return None;
        }
        Err(e) => panic!("{test}: {e}"),
    }
    Some(GuestImage::locate_or_build().unwrap_or_else(|e| panic!("{test}: {e}")))
}
