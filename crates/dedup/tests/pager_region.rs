//! memvisor's own regions (the pager's `Region`) scanned by the dedup scanner: through this
//! process's pagemap, so only resident pages are read and scanning never pages anything in.

use memvisor_dedup::{ProcessMemory, Scanner, ScannerConfig, PAGE_SIZE};
use memvisor_pager::{Region, RegionConfig};

#[test]
fn scanning_a_region_reads_resident_pages_only_and_pages_nothing_in() {
    const MIB: usize = 1 << 20;
    // 8 MiB region, 2 MiB budget (1 MiB chunks): at most 2 chunks resident.
    let region =
        Region::new(RegionConfig::new(8 * MIB, 2 * MIB, "/var/tmp").name("dedup-test")).unwrap();
    let p = region.as_ptr();
    // Chunk 0 and chunk 7: page 0 and page 1 equal, page 2 a copy of them in chunk 7.
    for (chunk, page) in [(0usize, 0usize), (0, 1), (7, 2)] {
        // SAFETY: inside the region, which lives to the end of the test.
        let dst = unsafe { p.add(chunk * MIB + page * PAGE_SIZE) };
        for i in 0..PAGE_SIZE {
            // SAFETY: as above.
            unsafe { dst.add(i).write((i % 251) as u8 + 1) };
        }
    }
    let before = region.stats();
    let mut scanner = Scanner::new(ScannerConfig::default());
    scanner.add_source(Box::new(
        ProcessMemory::open(std::process::id() as i32)
            .unwrap()
            .only(std::iter::once(p as u64..p as u64 + region.len() as u64).collect()),
    ));
    let pass = scanner.pass();
    let after = region.stats();
    assert_eq!(after.page_ins, before.page_ins, "scanning paged nothing in");
    assert_eq!(after.missing_faults, before.missing_faults);
    assert_eq!(scanner.summary().duplicate_pages, 2);
    assert!(
        pass.absent_pages >= (6 * MIB / PAGE_SIZE) as u64,
        "{pass:?}"
    );
}
