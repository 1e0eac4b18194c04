//! [`ClassList`]: the few class ids under one hash (chains are almost always 0 or 1 long),
//! collected without allocating.

use crate::page_index::ClassId;

/// Up to 4 ids inline, more in a vector.
#[derive(Debug, Default)]
pub(crate) struct ClassList {
    inline: [ClassId; 4],
    len: usize,
    spill: Vec<ClassId>,
}

impl FromIterator<ClassId> for ClassList {
    fn from_iter<I: IntoIterator<Item = ClassId>>(iter: I) -> Self {
        let mut f = ClassList::default();
        for c in iter {
            if f.len < 4 {
                f.inline[f.len] = c;
                f.len += 1;
            } else {
                f.spill.push(c);
            }
        }
        f
    }
}

impl ClassList {
    /// The ids in insertion order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ClassId> + '_ {
        self.inline[..self.len]
            .iter()
            .copied()
            .chain(self.spill.iter().copied())
    }
}
