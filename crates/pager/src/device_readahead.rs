//! [`device_readahead`]: how far the kernel reads ahead of a sequential reader of a file — the
//! `read_ahead_kb` of the block device the file lives on. A cache limit must not drop that
//! readahead: the stream reads it next, and would read it from the device twice. The value
//! differs widely between hosts (128 KiB by default, 8 MiB on this project's development VM's
//! virtio disk), so it is read, not assumed.

use std::os::unix::fs::MetadataExt;
use std::os::unix::io::RawFd;
use std::path::Path;

/// The readahead window of the block device holding the file open as `fd`, in bytes; `None`
/// when the file is not on a block device (tmpfs, network and overlay filesystems, btrfs
/// subvolumes: an anonymous device number) or sysfs does not say.
pub(crate) fn device_readahead(fd: RawFd) -> Option<u64> {
    let dev = std::fs::metadata(format!("/proc/self/fd/{fd}")).ok()?.dev();
    readahead_of(Path::new("/sys/dev/block"), dev)
}

/// [`device_readahead`] of the device `dev`, with `sys_dev_block` for `/sys/dev/block`: a disk
/// has `queue/` itself, a partition's is its disk's (`../queue/`).
fn readahead_of(sys_dev_block: &Path, dev: u64) -> Option<u64> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        return None;
    }
    let node = sys_dev_block.join(format!("{major}:{minor}"));
    ["queue/read_ahead_kb", "../queue/read_ahead_kb"]
        .iter()
        .find_map(|rel| std::fs::read_to_string(node.join(rel)).ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_its_partition_and_no_device() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // A disk 254:0 with its queue, and its partition 254:1 in a directory below it (sysfs
        // links /sys/dev/block/254:1 to .../vda/vda1).
        std::fs::create_dir_all(root.join("vda/queue")).unwrap();
        std::fs::write(root.join("vda/queue/read_ahead_kb"), "8192\n").unwrap();
        std::fs::create_dir_all(root.join("vda/vda1")).unwrap();
        let links = root.join("dev");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(root.join("vda"), links.join("254:0")).unwrap();
        std::os::unix::fs::symlink(root.join("vda/vda1"), links.join("254:1")).unwrap();
        assert_eq!(
            readahead_of(&links, libc::makedev(254, 0)),
            Some(8192 << 10)
        );
        assert_eq!(
            readahead_of(&links, libc::makedev(254, 1)),
            Some(8192 << 10)
        );
        assert_eq!(readahead_of(&links, libc::makedev(254, 2)), None);
        assert_eq!(readahead_of(&links, libc::makedev(0, 44)), None);
    }

    #[test]
    fn a_file_on_this_host() {
        use std::os::fd::AsRawFd;
        // A file on a block device reads its disk's value; /proc has no device.
        let f = tempfile::tempfile_in("/var/tmp").unwrap();
        let dev = f.metadata().unwrap().dev();
        let disk =
            Path::new("/sys/dev/block").join(format!("{}:{}", libc::major(dev), libc::minor(dev)));
        if libc::major(dev) != 0 && disk.exists() {
            let ra = device_readahead(f.as_raw_fd());
            assert!(ra.is_some_and(|b| b % 1024 == 0), "{ra:?}");
        }
        let m = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(device_readahead(m.as_raw_fd()), None);
    }
}
