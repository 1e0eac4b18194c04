//! Real guests reading a virtio disk whose blocks carry a known pattern.

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use memvisor_testvm::{DiskCache, DiskConfig, DiskPattern, GuestConfig, GuestImage, TestVmError};

#[test]
fn disk_reads_verify_the_generated_image() {
    let Some(image) = GuestImage::for_test("disk_reads_verify_the_generated_image") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("pattern.img");
    image.make_disk_image(&disk, 64).unwrap();
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 64 << 20);

    let run = GuestConfig::new(
        256,
        "disk /dev/vda seq --reads 16384 --verify; disk /dev/vda zipf --reads 3000 --block 16384 --verify",
    )
    .disk(DiskConfig::new(&disk).cache(DiskCache::Writeback))
    .timeout(Duration::from_secs(60))
    .run(&image)
    .unwrap()
    .verified()
    .unwrap();
    let phases: Vec<_> = run.disk_phases().collect();
    assert_eq!(phases.len(), 2, "{:?}", run.console);
    let (seq, zipf) = (phases[0], phases[1]);
    assert_eq!(seq.pattern, DiskPattern::Seq);
    assert_eq!(seq.dev, "/dev/vda");
    assert_eq!((seq.block, seq.blocks, seq.reads), (4096, 16384, 16384));
    assert_eq!(seq.bytes, 64 << 20);
    assert_eq!(zipf.pattern, DiskPattern::Zipf);
    assert_eq!((zipf.block, zipf.blocks, zipf.reads), (16384, 4096, 3000));
    for phase in [seq, zipf] {
        assert!(phase.verified && phase.ok && phase.errors == 0, "{phase:?}");
    }
    eprintln!(
        "disk: boot {:.2} s; seq 4 KiB {:.0} ms ({:.0} MB/s); zipf 16 KiB {:.0} ms ({:.0} MB/s)",
        run.boot.unwrap().as_secs_f64(),
        seq.ms,
        seq.mbps,
        zipf.ms,
        zipf.mbps
    );
}

/// One changed byte on the host is found by the guest, named by block, and turned into a
/// `Corruption` error by `verified()`.
#[test]
fn a_corrupted_block_is_reported() {
    let Some(image) = GuestImage::for_test("a_corrupted_block_is_reported") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("corrupt.img");
    image.make_disk_image(&disk, 16).unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(&disk).unwrap();
    file.seek(SeekFrom::Start(1234 * 4096 + 777)).unwrap();
    file.write_all(&[0xa5]).unwrap();
    drop(file);

    let run = GuestConfig::new(256, "disk /dev/vda seq --reads 4096 --verify")
        .disk(DiskConfig::new(&disk))
        .timeout(Duration::from_secs(60))
        .run(&image)
        .unwrap();
    assert!(!run.ok());
    let phase = run.disk_phases().next().unwrap();
    assert_eq!(
        (phase.ok, phase.errors, phase.first_bad_block),
        (false, 1, Some(1234))
    );
    let done = run.done().unwrap();
    assert_eq!((done.errors, done.first_bad_block), (1, Some(1234)));
    match run.verified() {
        Err(TestVmError::Corruption {
            errors, first_bad, ..
        }) => assert_eq!((errors, first_bad.as_str()), (1, "block 1234")),
        other => panic!("expected Corruption, got {other:?}"),
    }
}
