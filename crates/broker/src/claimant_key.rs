//! [`ClaimantKey`]: what one claimant of the broker's total is: a process's guest RAM budget,
//! or the host page cache limit of one of its disk images.

use std::fmt;

/// The memory a claimant stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClaimantKey {
    /// The budget of process `pid` (its regions' resident memory).
    Ram(u32),
    /// The host page cache limit of the image at `path` (as its status spells it) read by
    /// process `pid`.
    ImageCache(u32, String),
}

impl ClaimantKey {
    /// The process the memory belongs to.
    pub fn pid(&self) -> u32 {
        match self {
            Self::Ram(pid) | Self::ImageCache(pid, _) => *pid,
        }
    }

    /// The image's path, for an image cache.
    pub fn image(&self) -> Option<&str> {
        match self {
            Self::Ram(_) => None,
            Self::ImageCache(_, path) => Some(path),
        }
    }
}

impl fmt::Display for ClaimantKey {
    /// `pid 123`, or `pid 123 image /var/lib/a.img`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ram(pid) => write!(f, "pid {pid}"),
            Self::ImageCache(pid, path) => write!(f, "pid {pid} image {path}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_process_and_the_image() {
        let ram = ClaimantKey::Ram(7);
        let cache = ClaimantKey::ImageCache(7, "/var/lib/a.img".into());
        assert_eq!(ram.to_string(), "pid 7");
        assert_eq!(cache.to_string(), "pid 7 image /var/lib/a.img");
        assert_eq!((ram.pid(), cache.pid()), (7, 7));
        assert_eq!((ram.image(), cache.image()), (None, Some("/var/lib/a.img")));
        assert_ne!(ram, cache);
    }
}
