//! Rescans of memory memvisor owns read only the pages written since the previous pass
//! (userfaultfd WP_ASYNC + PAGEMAP_SCAN) and still find new duplicates.

use memvisor_dedup::{fill_seeded, PageState, Scanner, ScannerConfig, TrackedMemory, PAGE_SIZE};
use memvisor_pager::Mapping;

/// Private anonymous pages of this process (the pager's `Mapping`, unmapped on drop).
struct Anon {
    map: Mapping,
}

impl Anon {
    fn new(pages: usize) -> Self {
        Self {
            map: Mapping::anonymous(pages * PAGE_SIZE).unwrap(),
        }
    }
    fn page(&mut self, i: usize) -> &mut [u8] {
        assert!((i + 1) * PAGE_SIZE <= self.map.len());
        // SAFETY: inside the mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(i * PAGE_SIZE), PAGE_SIZE) }
    }
}

#[test]
fn rescans_hash_only_written_pages_and_find_new_duplicates() {
    let mut mem = Anon::new(256);
    for i in 0..256 {
        fill_seeded(mem.page(i), i as u64 + 1);
    }
    // SAFETY: the mapping outlives the tracker (dropped first: declared later).
    let tracked = unsafe { TrackedMemory::new("owned", mem.map.as_ptr(), mem.map.len()) }.unwrap();
    let mut scanner = Scanner::new(ScannerConfig::default());
    scanner.add_source(Box::new(tracked));

    let first = scanner.pass();
    assert_eq!(first.pages_read, 256);
    assert_eq!(first.new_duplicates, 0);

    // Nothing written: nothing read.
    assert_eq!(scanner.pass().pages_read, 0);

    // Page 10 becomes a copy of page 3, page 20 of page 4, page 30 something new.
    let p3 = mem.page(3).to_vec();
    mem.page(10).copy_from_slice(&p3);
    let p4 = mem.page(4).to_vec();
    mem.page(20).copy_from_slice(&p4);
    fill_seeded(mem.page(30), 9999);
    let second = scanner.pass();
    assert_eq!(second.pages_read, 3);
    assert_eq!(second.pages_hashed, 3);
    assert_eq!(second.new_duplicates, 2);
    let s = scanner.summary();
    assert_eq!(s.pages, 256);
    assert_eq!(s.duplicate_pages, 2);

    // Page 3 changes: its old duplicate (page 10) is now unique again.
    fill_seeded(mem.page(3), 4242);
    let third = scanner.pass();
    assert_eq!(third.pages_read, 1);
    assert_eq!(scanner.summary().duplicate_pages, 1);
    assert_eq!(scanner.pass().pages_read, 0);
}

#[test]
fn the_first_pass_reads_everything_including_untouched_pages() {
    let mut mem = Anon::new(64);
    fill_seeded(mem.page(0), 1);
    // SAFETY: as above.
    let tracked = unsafe { TrackedMemory::new("owned", mem.map.as_ptr(), mem.map.len()) }.unwrap();
    let mut scanner = Scanner::new(ScannerConfig::default());
    scanner.add_source(Box::new(tracked));
    let first = scanner.pass();
    assert_eq!(first.pages_read, 64);
    assert_eq!(first.zero_pages, 63);
    // Writing a zero page makes it non-zero; only it is read.
    fill_seeded(mem.page(40), 1);
    let second = scanner.pass();
    assert_eq!(second.pages_read, 1);
    assert_eq!(second.new_duplicates, 1);
    let _ = PageState::Absent;
}

#[test]
fn misaligned_ranges_are_refused() {
    let mem = Anon::new(2);
    // SAFETY: the range is inside the mapping (and refused before use).
    let e = unsafe { TrackedMemory::new("bad", mem.map.as_ptr().add(1), PAGE_SIZE) }.unwrap_err();
    assert!(e.to_string().contains("not page-aligned"), "{e}");
}
