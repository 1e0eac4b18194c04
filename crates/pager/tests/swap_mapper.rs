//! The swap mapper and the false-read preventer (VSwapper) on real regions and real image files:
//! pages read from an image are evicted without a write and read back from the image; writes to
//! the image (announced) keep the page's old bytes; an image changed behind memvisor's back
//! poisons the page instead of giving wrong bytes; the program's own writes end the association;
//! and a randomized run checks every byte against a shadow copy.

mod common;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use common::{kernel_reads, pattern, read, stress_seed, supported, write, Rng};
use memvisor_pager::{page_size, ImageFile, PageInUnit, Region, RegionConfig, ResolveMode};
use memvisor_policy::PolicySpec;

const MODES: [ResolveMode; 2] = [ResolveMode::Copy, ResolveMode::AliasContinue];

/// A test image of `pages` pages of pattern data, its open file and memvisor's view of it.
struct TestImage {
    _file: tempfile::NamedTempFile,
    /// The program's descriptor (read-write).
    fd: File,
    image: Arc<ImageFile>,
    content: Vec<u8>,
}

impl TestImage {
    fn new(pages: usize, seed: u64) -> Self {
        let mut content = vec![0u8; pages * page_size()];
        pattern(seed, &mut content);
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&content).unwrap();
        let fd = File::options()
            .read(true)
            .write(true)
            .open(file.path())
            .unwrap();
        let image = Arc::new(ImageFile::open_fd(fd.as_raw_fd()).unwrap());
        Self {
            _file: file,
            fd,
            image,
            content,
        }
    }

    /// What the preload library does around the program's `pread` into region memory.
    fn read_into(&self, r: &Region, offset: usize, file_offset: usize, len: usize) {
        let epoch = self.image.read_epoch();
        r.prepare_overwrite(offset, len).unwrap();
        // SAFETY: `[offset, offset + len)` lies inside the live region; the kernel writes it.
        let n = unsafe {
            libc::pread(
                self.fd.as_raw_fd(),
                r.as_ptr().add(offset).cast(),
                len,
                file_offset as libc::off_t,
            )
        };
        assert_eq!(n, len as isize, "pread into the region");
        if let Some(e) = epoch {
            r.associate(offset, len, &self.image, file_offset as u64, e)
                .unwrap();
            r.barrier().unwrap();
        }
    }

    /// What the preload library does around the program's `pwrite` to the image.
    fn write_at(&mut self, r: &Region, file_offset: usize, data: &[u8]) {
        self.image.begin_write();
        r.image_written(
            self.image.key(),
            file_offset as u64,
            (file_offset + data.len()) as u64,
        )
        .unwrap();
        self.fd.write_all_at(data, file_offset as u64).unwrap();
        self.image.end_write();
        self.content[file_offset..file_offset + data.len()].copy_from_slice(data);
    }
}

fn region(dir: &tempfile::TempDir, mode: ResolveMode, chunks: usize, budget: usize) -> Region {
    let chunk = 4 * page_size();
    Region::new(
        RegionConfig::new(chunks * chunk, budget * chunk, dir.path())
            .chunk_size(chunk)
            .resolve(mode),
    )
    .unwrap()
}

/// Touches (writes one byte per page of) chunks `from..to` of 4 pages: evicts the others.
fn churn(r: &Region, from: usize, to: usize, seed: u8) {
    let ps = page_size();
    for p in from * 4..to * 4 {
        write(r, p * ps, &[seed ^ p as u8]);
    }
}

#[test]
fn image_pages_are_evicted_without_a_write_and_read_back_from_the_image() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(64, 1);
        let r = region(&dir, mode, 32, 4);
        // 32 pages of the image into chunks 0..8 (twice the budget of 4 chunks), in reads of
        // 8 pages.
        for i in 0..4 {
            img.read_into(&r, i * 8 * ps, (16 + i * 8) * ps, 8 * ps);
        }
        let s = r.stats();
        assert_eq!(s.image_associations_refused, 0, "{mode:?}: {s:?}");
        assert!(s.image_pages >= 16, "{mode:?}: {s:?}");
        churn(&r, 16, 32, 3);
        let s = r.stats();
        // Only the churned pages (one byte each) were ever worth writing.
        assert!(
            s.bytes_written <= (16 * 4 * ps) as u64,
            "{mode:?}: image pages were written to swap: {s:?}"
        );
        assert!(
            s.swap_write_bytes_avoided >= (16 * ps) as u64,
            "{mode:?}: {s:?}"
        );
        let mut back = vec![0u8; 32 * ps];
        read(&r, 0, &mut back);
        assert!(
            back == img.content[16 * ps..48 * ps],
            "{mode:?}: wrong bytes back"
        );
        let s = r.stats();
        assert!(s.image_read_bytes >= (16 * ps) as u64, "{mode:?}: {s:?}");
        assert_eq!(s.read_errors, 0, "{mode:?}: {:?}", r.take_errors());
    }
}

/// A region for image-first eviction: CLOCK without samples (no reference bits, so the
/// order is the policy's alone), whole chunks paged in.
fn image_first_region(dir: &tempfile::TempDir, mode: ResolveMode, chunks: usize) -> Region {
    let chunk = 4 * page_size();
    Region::new(
        RegionConfig::new(chunks * chunk, 8 * chunk, dir.path())
            .chunk_size(chunk)
            .resolve(mode)
            .policy(PolicySpec::Clock)
            .sample_interval(None)
            .page_in_unit(PageInUnit::Chunk),
    )
    .unwrap()
}

/// Writes pattern `seed` over chunk `c` (4 pages) of the program's own memory.
fn write_own_chunk(r: &Region, c: usize, seed: u64) {
    let mut buf = vec![0u8; 4 * page_size()];
    pattern(seed, &mut buf);
    write(r, c * buf.len(), &buf);
}

/// Whether chunk `c` still holds pattern `seed`.
fn own_chunk_intact(r: &Region, c: usize, seed: u64) -> bool {
    let (mut want, mut got) = (vec![0u8; 4 * page_size()], vec![0u8; 4 * page_size()]);
    pattern(seed, &mut want);
    read(r, c * got.len(), &mut got);
    got == want
}

/// A guest's own memory, written once, and its disk streamed twice through its page cache
/// (seed 004's main case): the image chunks go first, the guest's chunks are never written to
/// swap and never leave memory. Plain CLOCK writes them out as the stream passes.
#[test]
fn a_disk_stream_leaves_the_guests_own_memory_in_place() {
    if !supported() {
        return;
    }
    let chunk = 4 * page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(60 * 4, 11);
        let r = image_first_region(&dir, mode, 64);
        for c in 0..4 {
            write_own_chunk(&r, c, c as u64);
        }
        for _ in 0..2 {
            for c in 4..64 {
                img.read_into(&r, c * chunk, (c - 4) * chunk, chunk);
            }
        }
        let s = r.stats();
        assert_eq!(s.bytes_written, 0, "{mode:?}: {s:?}");
        assert!(s.own_chunks_spared > 0, "{mode:?}: {s:?}");
        for c in 0..4 {
            assert!(own_chunk_intact(&r, c, c as u64), "{mode:?}: chunk {c}");
        }
        assert_eq!(
            r.stats().page_ins,
            s.page_ins,
            "{mode:?}: own chunks left memory"
        );
        // The image chunks come back from the image.
        let mut back = vec![0u8; chunk];
        for c in [4, 30, 63] {
            read(&r, c * chunk, &mut back);
            assert!(
                back == img.content[(c - 4) * chunk..(c - 3) * chunk],
                "{mode:?}: {c}"
            );
        }
        assert!(r.take_errors().is_empty());
    }
}

/// Disk data the guest re-reads that would fit beside its cold own memory but not with it:
/// sparing the own chunks would make the image chunks page in on every pass; they come back
/// within the budget, so sparing stops, the own chunks are written out, and the loop fits.
/// Every byte stays right.
#[test]
fn image_chunks_that_keep_coming_back_end_the_sparing() {
    if !supported() {
        return;
    }
    let chunk = 4 * page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(6 * 4, 12);
        let r = image_first_region(&dir, mode, 16);
        img.read_into(&r, 4 * chunk, 0, 6 * chunk);
        // Written after the read: the image chunks are older, and go first.
        for c in 0..4 {
            write_own_chunk(&r, c, c as u64);
        }
        let mut page_ins = Vec::new();
        let mut back = vec![0u8; 6 * chunk];
        for _ in 0..20 {
            let before = r.stats().page_ins;
            for c in 4..10 {
                read(&r, c * chunk, &mut back[(c - 4) * chunk..(c - 3) * chunk]);
            }
            assert!(back == img.content, "{mode:?}: the image data changed");
            page_ins.push(r.stats().page_ins - before);
        }
        assert!(
            page_ins[15..].iter().all(|&n| n == 0),
            "{mode:?}: page-ins per pass {page_ins:?}, {:?}",
            r.stats()
        );
        assert!(r.stats().bytes_written > 0, "{mode:?}: {:?}", r.stats());
        for c in 0..4 {
            assert!(own_chunk_intact(&r, c, c as u64), "{mode:?}: chunk {c}");
        }
        assert!(r.take_errors().is_empty());
    }
}

#[test]
fn an_announced_image_write_keeps_the_old_bytes_in_the_page() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let mut img = TestImage::new(16, 2);
        let old = img.content.clone();
        let r = region(&dir, mode, 16, 2);
        img.read_into(&r, 0, 0, 8 * ps);
        churn(&r, 4, 16, 9); // chunks 0 and 1 leave memory
                             // Overwrite blocks 2..6 of the image (not page-aligned at either end).
        img.write_at(&r, 2 * ps + 100, &vec![0xEE; 4 * ps - 200]);
        let s = r.stats();
        // Blocks 2, 3, 4 and 5 overlap the write.
        assert_eq!(s.image_associations_ended_by_image, 4, "{mode:?}: {s:?}");
        churn(&r, 4, 16, 7);
        let mut back = vec![0u8; 8 * ps];
        read(&r, 0, &mut back);
        assert!(
            back == old[..8 * ps],
            "{mode:?}: the page lost its old bytes"
        );
        assert!(r.take_errors().is_empty());
    }
}

#[test]
fn an_image_changed_behind_memvisor_poisons_the_page() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(8, 3);
        let r = region(&dir, mode, 16, 2);
        img.read_into(&r, 0, 0, 4 * ps);
        churn(&r, 4, 16, 5);
        assert!(r.stats().image_pages > 0);
        // Not announced: as if another process wrote the image.
        img.fd.write_all_at(&[0x55; 16], ps as u64 + 7).unwrap();
        let e = kernel_reads(&r, ps, ps).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{mode:?}");
        let errors = r.take_errors();
        assert!(
            errors.iter().any(|e| e
                .to_string()
                .contains("image block changed outside memvisor")),
            "{mode:?}: {errors:?}"
        );
        // The pages whose blocks did not change are still right.
        let mut page = vec![0u8; ps];
        read(&r, 3 * ps, &mut page);
        assert!(page == img.content[3 * ps..4 * ps], "{mode:?}");
        // Discarding the poisoned page makes it a zero page again.
        r.discard(ps, ps).unwrap();
        assert_eq!(kernel_reads(&r, ps, ps).unwrap(), vec![0u8; ps]);
    }
}

#[test]
fn a_program_write_ends_the_association() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(8, 4);
        let r = region(&dir, mode, 16, 2);
        img.read_into(&r, 0, 0, 8 * ps);
        write(&r, 3 * ps + 10, b"guest");
        churn(&r, 4, 16, 6);
        let s = r.stats();
        assert!(s.image_associations_ended_by_guest >= 1, "{mode:?}: {s:?}");
        let mut want = img.content.clone();
        want[3 * ps + 10..3 * ps + 15].copy_from_slice(b"guest");
        let mut back = vec![0u8; 8 * ps];
        read(&r, 0, &mut back);
        assert!(back == want, "{mode:?}");
    }
}

#[test]
fn a_kernel_write_into_an_associated_page_is_seen_by_dirty_tracking() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(16, 7);
        let r = region(&dir, mode, 16, 2);
        img.read_into(&r, 0, 0, 4 * ps);
        assert_eq!(r.stats().image_pages, 4);
        // A plain pread (not announced) of other blocks over the associated pages.
        // SAFETY: the range is inside the live region; the kernel writes it.
        let n = unsafe {
            libc::pread(
                img.fd.as_raw_fd(),
                r.as_ptr().cast(),
                4 * ps,
                (8 * ps) as libc::off_t,
            )
        };
        assert_eq!(n, (4 * ps) as isize);
        churn(&r, 4, 16, 8);
        let s = r.stats();
        assert_eq!(s.dirty_tracking_misses, 0, "{mode:?}: {s:?}");
        assert_eq!(s.image_associations_ended_by_guest, 4, "{mode:?}: {s:?}");
        let mut back = vec![0u8; 4 * ps];
        read(&r, 0, &mut back);
        assert!(back == img.content[8 * ps..12 * ps], "{mode:?}");
    }
}

#[test]
fn a_read_during_an_image_write_makes_no_association() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let img = TestImage::new(8, 5);
    let r = region(&dir, ResolveMode::Copy, 16, 4);
    let epoch = img.image.read_epoch().unwrap();
    img.image.begin_write();
    assert!(img.image.read_epoch().is_none());
    img.image.end_write();
    write(&r, 0, &img.content[..4 * ps]);
    r.associate(0, 4 * ps, &img.image, 0, epoch).unwrap();
    r.barrier().unwrap();
    let s = r.stats();
    assert_eq!(s.image_pages, 0, "{s:?}");
    assert_eq!(s.image_associations_refused, 4, "{s:?}");
    // A page that is not equal to its block (page 4: zeros, not block 0) is associated, but
    // found out at its first eviction: never dropped. Page 5 equals block 1.
    let epoch = img.image.read_epoch().unwrap();
    write(&r, 5 * ps, &img.content[ps..2 * ps]);
    r.associate(4 * ps, 2 * ps, &img.image, 0, epoch).unwrap();
    r.barrier().unwrap();
    assert_eq!(r.stats().image_pages, 2);
    churn(&r, 4, 16, 3);
    let s = r.stats();
    assert_eq!(s.image_associations_ended_by_guest, 1, "{s:?}");
    assert_eq!(s.swap_write_bytes_avoided, ps as u64, "{s:?}");
    let mut back = vec![0u8; ps];
    read(&r, 4 * ps, &mut back);
    assert!(back == vec![0u8; ps]);
    read(&r, 5 * ps, &mut back);
    assert!(back == img.content[ps..2 * ps]);
}

#[test]
fn the_false_read_preventer_maps_covered_pages_without_reading_swap() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(16, 6);
        let r = region(&dir, mode, 16, 2);
        let mut old = vec![0u8; 16 * ps];
        pattern(60, &mut old);
        write(&r, 0, &old);
        churn(&r, 8, 16, 1); // chunks 0..4 go to swap
        let before = r.stats();
        // Offset 100, 8 pages long: pages 1..8 are covered whole; 0 and 8 in part.
        img.read_into(&r, 100, 0, 8 * ps);
        let s = r.stats();
        assert_eq!(
            s.false_read_bytes_avoided - before.false_read_bytes_avoided,
            (7 * ps) as u64,
            "{mode:?}: {s:?}"
        );
        let mut want = old.clone();
        want[100..100 + 8 * ps].copy_from_slice(&img.content[..8 * ps]);
        churn(&r, 8, 16, 2);
        let mut back = vec![0u8; 16 * ps];
        read(&r, 0, &mut back);
        assert!(back == want, "{mode:?}: partly covered pages lost bytes");
    }
}

/// Randomized: image reads (aligned or not), program writes, announced image writes and
/// discards on a region with a budget of 2 of 12 chunks, every byte checked against a shadow.
#[test]
fn randomized_image_reads_writes_and_evictions_match_a_shadow() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for (seed, mode) in [(11, ResolveMode::Copy), (12, ResolveMode::AliasContinue)] {
        let seed = seed + (stress_seed() << 8);
        let dir = tempfile::tempdir().unwrap();
        let mut img = TestImage::new(40, seed);
        let len = 12 * 4 * ps;
        let r = region(&dir, mode, 12, 2);
        let mut shadow = vec![0u8; len];
        let mut rng = Rng::new(seed);
        for step in 0..600 {
            match rng.below(10) {
                0..=3 => {
                    let pages = 1 + rng.below(9);
                    let off =
                        rng.below(len - pages * ps) & !(if rng.below(2) == 0 { ps - 1 } else { 0 });
                    let foff = rng.below(img.content.len() - pages * ps);
                    img.read_into(&r, off, foff, pages * ps);
                    shadow[off..off + pages * ps]
                        .copy_from_slice(&img.content[foff..foff + pages * ps]);
                }
                4..=5 => {
                    let off = rng.below(len - 64);
                    let mut b = [0u8; 64];
                    pattern(rng.next(), &mut b);
                    let n = 1 + rng.below(64);
                    write(&r, off, &b[..n]);
                    shadow[off..off + n].copy_from_slice(&b[..n]);
                }
                6..=7 => {
                    let n = 1 + rng.below(3 * ps);
                    let foff = rng.below(img.content.len() - n);
                    let mut b = vec![0u8; n];
                    pattern(rng.next(), &mut b);
                    img.write_at(&r, foff, &b);
                }
                8 => {
                    let first = rng.below(len / ps - 4);
                    let n = 1 + rng.below(4);
                    r.discard(first * ps, n * ps).unwrap();
                    shadow[first * ps..(first + n) * ps].fill(0);
                }
                _ => {
                    // Read a random page back (faults pages in, evicts others).
                    let p = rng.below(len / ps);
                    let mut b = vec![0u8; ps];
                    read(&r, p * ps, &mut b);
                    assert!(
                        b == shadow[p * ps..(p + 1) * ps],
                        "{mode:?} seed {seed} step {step}: page {p} differs"
                    );
                }
            }
        }
        let mut back = vec![0u8; len];
        read(&r, 0, &mut back);
        for p in 0..len / ps {
            assert!(
                back[p * ps..(p + 1) * ps] == shadow[p * ps..(p + 1) * ps],
                "{mode:?} seed {seed}: page {p} differs at the end"
            );
        }
        let s = r.stats();
        assert_eq!(s.read_errors, 0, "{mode:?}: {:?}", r.take_errors());
        assert_eq!(s.dirty_tracking_misses, 0, "{mode:?}: {s:?}");
        assert!(
            s.swap_write_bytes_avoided > 0 && s.image_read_bytes > 0,
            "{mode:?}: {s:?}"
        );
        assert!(s.image_associations_ended_by_image > 0, "{mode:?}: {s:?}");
    }
}

/// A kernel-mode write (a `pread` into the region, as QEMU's worker threads do) into pages
/// that are out of memory raises faults the handler serves, never `EFAULT`: the userfaultfd
/// must not be opened with `UFFD_USER_MODE_ONLY`, which would turn every such read of a guest
/// into an I/O error.
#[test]
fn a_plain_kernel_read_into_pages_out_of_memory_succeeds() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let img = TestImage::new(8, 9);
        let r = region(&dir, mode, 16, 2);
        churn(&r, 0, 16, 4); // chunks 0..14 leave memory (in swap)
        assert!(r.stats().page_outs > 0);
        // SAFETY: the range is inside the live region; the kernel writes it.
        let n = unsafe { libc::pread(img.fd.as_raw_fd(), r.as_ptr().cast(), 8 * ps, 0) };
        assert_eq!(
            n,
            (8 * ps) as isize,
            "{mode:?}: {}",
            std::io::Error::last_os_error()
        );
        let mut back = vec![0u8; 8 * ps];
        read(&r, 0, &mut back);
        assert!(back == img.content, "{mode:?}");
    }
}
