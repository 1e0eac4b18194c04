//! [`PageInUnit`]: how much a page-in reads.

/// How much a missing fault brings in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageInUnit {
    /// Decided per fault from the faulting thread's recent faults (the default): the faulting
    /// page alone when faults are scattered, a window growing from 4 pages as faults start to
    /// stream through addresses, the chunk's missing pages (and the next chunk read ahead)
    /// once the window spans a chunk.
    #[default]
    Adaptive,
    /// Always every missing page of the chunk (the pager before the adaptive unit).
    Chunk,
    /// Always the faulting page alone.
    Page,
}

impl PageInUnit {
    /// Name as a command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Chunk => "chunk",
            Self::Page => "page",
        }
    }
}

impl std::fmt::Display for PageInUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PageInUnit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "adaptive" => Ok(Self::Adaptive),
            "chunk" => Ok(Self::Chunk),
            "page" => Ok(Self::Page),
            _ => Err(format!(
                "page-in unit {s:?}: expected adaptive, chunk or page"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for u in [PageInUnit::Adaptive, PageInUnit::Chunk, PageInUnit::Page] {
            assert_eq!(u.name().parse::<PageInUnit>(), Ok(u));
        }
        assert!("chunks"
            .parse::<PageInUnit>()
            .unwrap_err()
            .contains("chunks"));
    }
}
