//! [`DataSet`]: the workload's memory as 4 KiB pages of self-describing 8-byte words, so every
//! read is checked and a pager that returns wrong data fails instead of winning.
//!
//! Word `w` of page `p` holds `p << 32 | w << 20 | (count mod 2^20)`, where `count` is how
//! many times that word was read-modify-written since the fill (which writes count 0).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bench_error::BenchError;

/// Bytes per page of the data set (the access unit; independent of the pager's chunk size).
pub const PAGE: usize = 4096;

/// 8-byte words per page.
pub const WORDS_PER_PAGE: usize = PAGE / 8;

const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// The value of word `word` of page `page` after `count` modifications.
pub fn word_value(page: u64, word: u64, count: u64) -> u64 {
    (page << 32) | (word << COUNT_BITS) | (count & COUNT_MASK)
}

/// The data set: a whole number of pages.
#[derive(Debug)]
pub struct DataSet<'a> {
    words: &'a mut [u64],
}

impl<'a> DataSet<'a> {
    /// The data set over `words`; a trailing partial page is ignored.
    pub fn new(words: &'a mut [u64]) -> Self {
        let whole = words.len() / WORDS_PER_PAGE * WORDS_PER_PAGE;
        Self {
            words: &mut words[..whole],
        }
    }

    /// Number of pages.
    pub fn pages(&self) -> u64 {
        (self.words.len() / WORDS_PER_PAGE) as u64
    }

    /// Writes every word of every page with count 0, first page to last.
    pub fn fill(&mut self) {
        for (p, page) in self.words.chunks_exact_mut(WORDS_PER_PAGE).enumerate() {
            for (w, word) in page.iter_mut().enumerate() {
                *word = word_value(p as u64, w as u64, 0);
            }
        }
    }

    /// One access to `page`: reads its first `words` words, checks that each holds `count`
    /// modifications and, if `write`, stores the value for `count + 1`.
    pub fn touch(
        &mut self,
        page: u64,
        count: u64,
        words: usize,
        write: bool,
    ) -> Result<(), BenchError> {
        let start = page as usize * WORDS_PER_PAGE;
        let slice = &mut self.words[start..start + words];
        for (w, word) in slice.iter_mut().enumerate() {
            check_word(page, w as u64, count, *word)?;
            if write {
                *word = word_value(page, w as u64, count + 1);
            }
        }
        Ok(())
    }
}

/// Whether word `w` of page `page`, read as `found`, holds `count` modifications.
fn check_word(page: u64, w: u64, count: u64, found: u64) -> Result<(), BenchError> {
    let expected = word_value(page, w, count);
    if found != expected {
        return Err(BenchError::Corrupt {
            page,
            word: w,
            expected,
            found,
        });
    }
    Ok(())
}

/// A [`DataSet`] several threads touch at once, each its own pages (the words are atomics,
/// so threads never race on a word, whatever pages they pick).
pub struct SharedDataSet<'a> {
    words: &'a [AtomicU64],
}

impl<'a> SharedDataSet<'a> {
    /// The data set over `words`, shared; a trailing partial page is ignored.
    pub fn new(words: &'a mut [u64]) -> Self {
        let whole = words.len() / WORDS_PER_PAGE * WORDS_PER_PAGE;
        let words = &mut words[..whole];
        // SAFETY: `AtomicU64` has the size and alignment of `u64` (x86_64 and every 64-bit
        // target the pager runs on), and the exclusive borrow of `words` is held for `'a`, so
        // nobody else accesses them other than through these atomics.
        let words = unsafe { &*(words as *mut [u64] as *const [AtomicU64]) };
        Self { words }
    }

    /// [`DataSet::touch`], through a shared reference.
    pub fn touch(
        &self,
        page: u64,
        count: u64,
        words: usize,
        write: bool,
    ) -> Result<(), BenchError> {
        let start = page as usize * WORDS_PER_PAGE;
        for (w, word) in self.words[start..start + words].iter().enumerate() {
            check_word(page, w as u64, count, word.load(Ordering::Relaxed))?;
            if write {
                word.store(word_value(page, w as u64, count + 1), Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_touches_match_exclusive_ones() {
        let mut mem = vec![0u64; 2 * WORDS_PER_PAGE];
        DataSet::new(&mut mem).fill();
        let shared = SharedDataSet::new(&mut mem);
        std::thread::scope(|s| {
            for p in 0..2u64 {
                let shared = &shared;
                s.spawn(move || {
                    for c in 0..50 {
                        shared.touch(p, c, WORDS_PER_PAGE, true).unwrap();
                    }
                });
            }
        });
        assert!(shared.touch(0, 49, 1, false).is_err());
        shared.touch(1, 50, WORDS_PER_PAGE, false).unwrap();
    }

    #[test]
    fn fill_touch_and_detect_corruption() {
        let mut mem = vec![0u64; 3 * WORDS_PER_PAGE + 5];
        let mut d = DataSet::new(&mut mem);
        assert_eq!(d.pages(), 3);
        d.fill();
        d.touch(1, 0, WORDS_PER_PAGE, true).unwrap();
        d.touch(1, 1, 1, true).unwrap();
        d.touch(2, 0, 4, false).unwrap();
        d.touch(2, 0, 4, false).unwrap();
        // Page 1 word 0 is at count 2, word 1 at count 1.
        assert!(d.touch(1, 1, 1, false).is_err());
        d.touch(1, 2, 1, false).unwrap();
        let e = d.touch(1, 2, 2, false).unwrap_err();
        assert!(
            matches!(
                e,
                BenchError::Corrupt {
                    page: 1,
                    word: 1,
                    ..
                }
            ),
            "{e}"
        );
        // A page holding another page's data is caught.
        mem.copy_within(0..WORDS_PER_PAGE, 2 * WORDS_PER_PAGE);
        let mut d = DataSet::new(&mut mem);
        let e = d.touch(2, 0, 1, false).unwrap_err();
        assert!(e.to_string().contains("page 2 word 0"), "{e}");
        // Counts wrap at 2^20 consistently.
        assert_eq!(word_value(0, 0, 1 << 20), word_value(0, 0, 0));
    }
}
