//! [`DemandReader`]: the page-in read of a faulting chunk, submitted to an io_uring so the
//! handler can do other work (choose and start writing the next victims) while the disk reads,
//! instead of sleeping in `pread`. One read at a time; no extra threads.

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, types, IoUring};

use crate::uring_completion::{transfer_result, Transfer};

/// An io_uring for one chunk read at a time.
pub(crate) struct DemandReader {
    ring: IoUring,
    /// The read in flight: its buffer address and length.
    in_flight: Option<(usize, usize)>,
}

impl std::fmt::Debug for DemandReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemandReader")
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl DemandReader {
    /// A reader; fails where io_uring is unavailable (e.g. `kernel.io_uring_disabled`).
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            ring: IoUring::new(2)?,
            in_flight: None,
        })
    }

    /// Starts reading `buf.len()` bytes at `offset` of `fd` into `buf`.
    ///
    /// # Safety
    ///
    /// `buf` must stay valid, and untouched by anyone else, until [`finish`](Self::finish)
    /// returns (or, if it is never called, until the reader is dropped: dropping waits for the
    /// read), and `fd` must stay open as long. After an error, the reader must be dropped
    /// without being used again.
    pub unsafe fn start(&mut self, fd: RawFd, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.in_flight.is_some() {
            return Err(io::Error::other("a demand read is already in flight"));
        }
        let len = u32::try_from(buf.len()).map_err(|_| io::Error::other("read too large"))?;
        let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .offset(offset)
            .build()
            .user_data(0);
        // SAFETY: the buffer and descriptor outlive the read, per this function's contract.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        // io_uring_enter consumes nothing when it fails, so until a submit succeeds the kernel
        // does not know of the entry. Transient refusals are retried; after a lasting one the
        // entry stays queued, unseen, and the caller must drop this reader without using it
        // again (closing the ring discards the entry).
        for attempt in 0.. {
            match self.ring.submit() {
                Ok(n) if n >= 1 => {
                    self.in_flight = Some((buf.as_ptr() as usize, buf.len()));
                    return Ok(());
                }
                Ok(_) => return Err(io::Error::other("io_uring accepted no entry")),
                Err(e) if is_transient(&e) && attempt < 1000 => {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    /// Waits for the read in flight and returns its outcome: `Ok` once all bytes are in. Only
    /// returns once the kernel has finished with the buffer. (Polling for the completion
    /// instead of sleeping was tried with busy polling on: no faster on the development VM.)
    pub fn finish(&mut self) -> io::Result<()> {
        let Some((_, len)) = self.in_flight else {
            return Err(io::Error::other("no demand read in flight"));
        };
        loop {
            if let Some(cqe) = self.ring.completion().next() {
                self.in_flight = None;
                return transfer_result(cqe.result(), len, Transfer::Read);
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if !is_transient(&e) {
                    // The read was accepted and completes regardless; its completion shows up
                    // in the ring's memory once the kernel has run this thread's task work,
                    // which any system call (here the sleep) does.
                    std::thread::sleep(std::time::Duration::from_micros(10));
                }
            }
        }
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

impl Drop for DemandReader {
    fn drop(&mut self) {
        // Never let the kernel write into a buffer after its owner is gone.
        if self.in_flight.is_some() {
            let _ = self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_what_the_file_holds_and_reports_short_reads() {
        let mut f = tempfile_in_tmp();
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        f.write_all(&data).unwrap();
        let Ok(mut r) = DemandReader::new() else {
            eprintln!("io_uring unavailable: skipped");
            return;
        };
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` and `f` outlive the read, which `finish` waits for.
        unsafe { r.start(f.as_raw_fd(), 4096, &mut buf) }.unwrap();
        assert!(
            // SAFETY: as above.
            unsafe { r.start(f.as_raw_fd(), 0, &mut buf) }.is_err(),
            "one read at a time"
        );
        r.finish().unwrap();
        assert_eq!(&buf[..], &data[4096..]);
        // SAFETY: as above.
        unsafe { r.start(f.as_raw_fd(), 6144, &mut buf) }.unwrap();
        let e = r.finish().unwrap_err();
        assert!(e.to_string().contains("short read: 2048 of 4096"), "{e}");
        assert!(r.finish().is_err(), "nothing in flight");
    }

    fn tempfile_in_tmp() -> std::fs::File {
        // Unnamed (O_TMPFILE, or created exclusively and unlinked): nothing planted in /tmp is
        // followed, even when the tests run as root.
        tempfile::tempfile().unwrap()
    }
}
