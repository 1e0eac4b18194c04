//! Configuration checks.

mod common;

use common::supported;
use memvisor_pager::{
    page_size, PagerError, Region, RegionConfig, ResolveMode, DEFAULT_CHUNK_SIZE,
    DEFAULT_SAMPLE_INTERVAL,
};

#[test]
fn bad_configurations_are_errors_not_panics() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ps = page_size();
    let bad = [
        RegionConfig::new(1 << 20, 1 << 20, dir.path()).chunk_size(ps + 1),
        RegionConfig::new(1 << 20, 1 << 20, dir.path()).chunk_size(0),
        RegionConfig::new(0, 1 << 20, dir.path()),
        RegionConfig::new(4 << 20, (1 << 20) - 1, dir.path()),
    ];
    for c in bad {
        let e = Region::new(c).unwrap_err();
        assert!(matches!(e, PagerError::Config(_)), "{e}");
    }
    let e = Region::new(RegionConfig::new(
        4 << 20,
        1 << 20,
        dir.path().join("missing"),
    ))
    .unwrap_err();
    assert!(matches!(e, PagerError::SwapFile { .. }), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn defaults_and_accessors() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let size = 3 * DEFAULT_CHUNK_SIZE + 12345;
    let r = Region::new(RegionConfig::new(
        size,
        2 * DEFAULT_CHUNK_SIZE + 5,
        dir.path(),
    ))
    .unwrap();
    assert_eq!(r.len(), size);
    assert_eq!(r.chunk_size(), DEFAULT_CHUNK_SIZE);
    assert_eq!(r.budget_chunks(), 2);
    assert_eq!(r.resolve_mode(), ResolveMode::Copy);
    let defaults = RegionConfig::new(1, 1, "/");
    assert_eq!(defaults.policy.name(), "clock");
    assert_eq!(defaults.sample_interval, Some(DEFAULT_SAMPLE_INTERVAL));
    assert!(r.swap_is_direct());
    assert_eq!(r.stats().chunks, 4);
    assert!(r.handler_alive());
    // The last byte (in the partial last chunk) is usable.
    // SAFETY: inside the live region; single thread.
    unsafe {
        r.as_ptr().add(size - 1).write(3);
        assert_eq!(r.as_ptr().add(size - 1).read(), 3);
    }
    // A budget larger than the region is clamped.
    let r = Region::new(RegionConfig::new(
        DEFAULT_CHUNK_SIZE,
        8 * DEFAULT_CHUNK_SIZE,
        dir.path(),
    ))
    .unwrap();
    assert_eq!(r.budget_chunks(), 1);
}
