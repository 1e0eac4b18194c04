//! One guest memory region as announced in `Begin`.

/// The most regions a `Begin` message may announce.
pub const MAX_REGIONS: usize = 64;
/// The longest region name, in bytes of UTF-8.
pub const MAX_REGION_NAME_LEN: usize = 256;
/// The smallest page size a region or a `Pages` message may have.
pub const MIN_PAGE_SIZE: u32 = 4096;
/// The largest page size a region may have (1 GiB huge pages).
pub const MAX_REGION_PAGE_SIZE: u32 = 1 << 30;

/// One guest memory region as the source sees it, announced in [`crate::Message::Begin`] so
/// the destination can check that its regions match before memory flows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RegionInfo {
    /// The region's name (QEMU's RAM block id, e.g. "pc.ram"), at most
    /// [`MAX_REGION_NAME_LEN`] bytes of UTF-8.
    pub name: String,
    /// The region's length in bytes.
    pub bytes: u64,
    /// The region's page size: a power of two from [`MIN_PAGE_SIZE`] to
    /// [`MAX_REGION_PAGE_SIZE`].
    pub page_size: u32,
}

impl RegionInfo {
    /// What breaks the region rules, if anything (`index` is its place in `Begin`).
    pub(crate) fn problem(&self, index: usize) -> Option<String> {
        if self.name.len() > MAX_REGION_NAME_LEN {
            return Some(format!(
                "region {index} name is {} bytes long, over the {MAX_REGION_NAME_LEN}-byte limit",
                self.name.len()
            ));
        }
        if !self.page_size.is_power_of_two()
            || !(MIN_PAGE_SIZE..=MAX_REGION_PAGE_SIZE).contains(&self.page_size)
        {
            return Some(format!(
                "region {index} ({:?}) has page size {}, expected a power of two from \
                 {MIN_PAGE_SIZE} to {MAX_REGION_PAGE_SIZE}",
                self.name, self.page_size
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, page_size: u32) -> RegionInfo {
        RegionInfo {
            name: name.into(),
            bytes: 1 << 30,
            page_size,
        }
    }

    #[test]
    fn checks_name_length_and_page_size() {
        assert_eq!(region("pc.ram", 4096).problem(0), None);
        assert_eq!(region("pc.ram", 1 << 21).problem(0), None);
        assert_eq!(region(&"n".repeat(256), 1 << 30).problem(0), None);
        assert!(region(&"n".repeat(257), 4096)
            .problem(3)
            .unwrap()
            .contains("region 3 name is 257 bytes long"));
        for bad in [0, 512, 4095, 12288, 1 << 31] {
            assert!(region("x", bad).problem(0).unwrap().contains("page size"));
        }
    }
}
