//! The checks `memvisor run` makes of `--swap-dir` before the program starts: that it is a
//! directory memvisor can create swap files in, and that its filesystem has room for them.
//!
//! The probe is a real swap file made the way the pager makes them ([`SwapFile::create`]):
//! `memvisor run` usually runs as root and the default swap directory (`/var/tmp`) is
//! world-writable, and a swap file never has a name there that another user could plant a
//! link at (`O_TMPFILE`, or `O_CREAT|O_EXCL|O_NOFOLLOW` unlinked at once).

use std::path::Path;

use memvisor_control::format_bytes;
use memvisor_pager::SwapFile;

/// What the swap directory can hold, as far as `memvisor run` can tell before the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapRoom {
    /// Room for everything the arena can page out beyond the budget.
    Enough,
    /// Less room than the arena could page out; only what the program uses is stored (the
    /// arena is sparse), so this may never matter. Carries the free bytes and the arena's need.
    Sparse {
        /// Bytes free to memvisor on the filesystem.
        free: u64,
        /// Bytes the arena could page out (arena less budget).
        need: u64,
    },
}

/// Why the swap directory cannot be used; the message names what is wrong.
pub type SwapDirProblem = String;

/// Checks that `dir` is a directory in which a swap file can be created, and that it has room:
/// at least one chunk, and, if `arena_is_sized` (the user gave `--arena`), all of
/// `arena - budget`. Returns how much room there is.
pub fn check_swap_dir(
    dir: &Path,
    chunk: u64,
    arena: u64,
    budget: u64,
    arena_is_sized: bool,
) -> Result<SwapRoom, SwapDirProblem> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("does not exist ({e})"))?;
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    let probe = SwapFile::create(dir, "probe", 4096, 1, None)
        .map_err(|e| format!("not writable: cannot create a swap file there ({e})"))?;
    let free = probe
        .free_bytes()
        .map_err(|e| format!("cannot read its free space ({e})"))?;
    if free < chunk {
        return Err(format!(
            "only {} free on its filesystem, less than one chunk ({})",
            format_bytes(free),
            format_bytes(chunk)
        ));
    }
    let need = arena.saturating_sub(budget);
    if free >= need {
        return Ok(SwapRoom::Enough);
    }
    if arena_is_sized {
        return Err(format!(
            "{} free on its filesystem, but the arena can page out {} beyond the budget \
             (--arena less --budget); free space, use another --swap-dir, or a smaller --arena",
            format_bytes(free),
            format_bytes(need)
        ));
    }
    Ok(SwapRoom::Sparse { free, need })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_probe_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"DATA").unwrap();
        let swap = dir.path().join("swap");
        std::fs::create_dir(&swap).unwrap();
        // The names the old probe and a named swap file would take.
        for n in 0..25 {
            let pid = std::process::id();
            std::os::unix::fs::symlink(&victim, swap.join(format!(".memvisor-probe-{}", pid + n)))
                .unwrap();
            std::os::unix::fs::symlink(
                &victim,
                swap.join(format!("memvisor-swap-{pid}-probe-{n}")),
            )
            .unwrap();
        }
        let room = check_swap_dir(&swap, 4096, 1 << 20, 0, false).unwrap();
        assert_eq!(room, SwapRoom::Enough);
        assert_eq!(std::fs::read(&victim).unwrap(), b"DATA");
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(&swap).unwrap().count(), 50);
    }

    #[test]
    fn room_is_checked_against_the_arena() {
        let dir = tempfile::tempdir().unwrap();
        let free = SwapFile::create(dir.path(), "t", 4096, 1, None)
            .unwrap()
            .free_bytes()
            .unwrap();
        assert!(free > 0);
        let huge = free.saturating_mul(4).max(1 << 50);
        assert!(matches!(
            check_swap_dir(dir.path(), 4096, huge, 0, false).unwrap(),
            SwapRoom::Sparse { need, .. } if need == huge
        ));
        let err = check_swap_dir(dir.path(), 4096, huge, 0, true).unwrap_err();
        assert!(err.contains("beyond the budget"), "{err}");
        let err = check_swap_dir(dir.path(), huge, huge, 0, false).unwrap_err();
        assert!(err.contains("less than one chunk"), "{err}");
        let err = check_swap_dir(&dir.path().join("missing"), 4096, 0, 0, false).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }
}
