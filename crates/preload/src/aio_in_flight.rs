//! Linux AIO requests in flight: what the library did when QEMU submitted them (`aio=native`,
//! [`crate::aio_entry_points`]) and must finish when the kernel completes them.
//!
//! A read into managed memory holds its chunks pinned against eviction until it completes
//! (with `O_DIRECT`, which `aio=native` requires, the device writes into the pages the kernel
//! pinned, and an eviction meanwhile would punch them from the region's memfd); a read of an
//! image into guest RAM had the false-read preventer run before it and gets its association
//! after it, if complete; a write to an image began a write ([`ImageFile::begin_write`]) that
//! must end.
//!
//! The kernel completes these requests without a library call. The library finds the
//! completions in each context's ring ([`AioRing`]): a watcher thread looks every
//! [`LOOK_PERIOD`] while requests are in flight (and sleeps otherwise), and each submission
//! looks at its context first. A control block submitted again while the library still holds
//! it as in flight was completed (a program reuses a block only once its request is done): it
//! is finished then without its result (no association; the pins go). `io_destroy` waits for
//! every request of the context, so all of them are finished after it, without results.
//! A ring that cannot be read (not the kernel's layout) leaves only these two ways: pins are
//! then held longer, which costs memory over the budget, never data.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use memvisor_pager::ImageFile;

use crate::aio_ring::{AioRing, IoEvent};
use crate::direct_io_reads::DirectIoReads;
use crate::image_io::PendingRead;

/// How often the watcher looks at the rings while requests are in flight.
pub const LOOK_PERIOD: Duration = Duration::from_millis(2);

/// What the library did at one request's submission.
pub struct Submitted {
    /// The control block's address (the completion event's `obj`).
    pub iocb: usize,
    /// The managed chunks its buffers touch, pinned.
    pub pins: DirectIoReads,
    /// A read of an image into guest RAM, started.
    pub read: Option<PendingRead>,
    /// A write to an image, begun.
    pub write: Option<Arc<ImageFile>>,
}

impl Submitted {
    /// Whether anything waits for the request's completion.
    pub fn needs_completion(&self) -> bool {
        !self.pins.is_empty() || self.read.is_some() || self.write.is_some()
    }

    /// The request completed with result `res` (bytes or a negative errno; `None`: not known):
    /// a complete read is associated, a write ends, the pins go.
    fn complete(self, res: Option<i64>) {
        if let (Some(read), Some(res)) = (&self.read, res) {
            read.finish(isize::try_from(res).unwrap_or(-1), 0);
        }
        if let Some(image) = &self.write {
            image.end_write();
        }
        drop(self.pins);
    }
}

/// One AIO context's requests in flight.
struct Context {
    /// Its id (the ring's address).
    id: usize,
    /// Its ring (`None`: unreadable).
    ring: Option<AioRing>,
    requests: Vec<Submitted>,
}

impl Context {
    /// Moves the requests whose completions the ring shows since the last look into `done`.
    fn look(&mut self, events: &mut Vec<IoEvent>, done: &mut Vec<(Submitted, Option<i64>)>) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        events.clear();
        let read = ring.completions(events);
        for e in events.iter() {
            if let Some(i) = self.requests.iter().position(|s| s.iocb as u64 == e.obj) {
                done.push((self.requests.swap_remove(i), Some(e.res)));
            }
        }
        if let Err(e) = read {
            eprintln!(
                "memvisor-preload: the completion ring of AIO context {:#x} cannot be read \
                 ({e}); its requests' pins now end only when their control blocks are reused \
                 or the context is destroyed",
                self.id
            );
            self.ring = None;
        }
    }
}

#[derive(Default)]
struct Table {
    contexts: Vec<Context>,
    watcher: bool,
}

impl Table {
    /// Requests held in contexts whose rings can be read (the watcher's work).
    fn in_flight(&self) -> usize {
        self.contexts
            .iter()
            .filter(|c| c.ring.is_some())
            .map(|c| c.requests.len())
            .sum()
    }

    fn context(&mut self, id: usize) -> &mut Context {
        let i = match self.contexts.iter().position(|c| c.id == id) {
            Some(i) => i,
            None => {
                self.contexts.push(Context {
                    id,
                    ring: AioRing::at(id).ok(),
                    requests: Vec::new(),
                });
                self.contexts.len() - 1
            }
        };
        &mut self.contexts[i]
    }
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    contexts: Vec::new(),
    watcher: false,
});
static WAKE: Condvar = Condvar::new();

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Requests of context `ctx` about to be submitted (before the system call, so that no
/// completion can come before the library knows the request). Completions already in the
/// ring are taken first; a control block still held as in flight is finished as reused.
pub fn register(ctx: usize, requests: Vec<Submitted>) {
    let requests: Vec<Submitted> = requests
        .into_iter()
        .filter(Submitted::needs_completion)
        .collect();
    if requests.is_empty() {
        return;
    }
    let mut done = Vec::new();
    let start_watcher = {
        let mut t = table();
        let c = t.context(ctx);
        c.look(&mut Vec::new(), &mut done);
        for s in requests {
            if let Some(i) = c.requests.iter().position(|o| o.iocb == s.iocb) {
                done.push((c.requests.swap_remove(i), None));
            }
            c.requests.push(s);
        }
        !std::mem::replace(&mut t.watcher, true)
    };
    WAKE.notify_one();
    for (s, res) in done {
        s.complete(res);
    }
    if start_watcher {
        start();
    }
}

/// The control blocks `iocbs` of context `ctx` were not submitted after all (`io_submit`
/// failed or took fewer): finished without a result.
pub fn withdraw(ctx: usize, iocbs: &[usize]) {
    let mut gone = Vec::new();
    {
        let mut t = table();
        if let Some(c) = t.contexts.iter_mut().find(|c| c.id == ctx) {
            for &b in iocbs {
                if let Some(i) = c.requests.iter().position(|s| s.iocb == b) {
                    gone.push(c.requests.swap_remove(i));
                }
            }
        }
    }
    for s in gone {
        s.complete(None);
    }
}

/// Context `ctx` is about to be destroyed: it is forgotten (its ring is not read again), and
/// the requests it held are returned, to be finished by [`finish_destroyed`] once the real
/// `io_destroy` has waited for them.
pub fn destroying(ctx: usize) -> Vec<Submitted> {
    let mut t = table();
    match t.contexts.iter().position(|c| c.id == ctx) {
        Some(i) => t.contexts.swap_remove(i).requests,
        None => Vec::new(),
    }
}

/// Finishes the requests of a destroyed context, without results.
pub fn finish_destroyed(requests: Vec<Submitted>) {
    for s in requests {
        s.complete(None);
    }
}

/// Run first by the watcher: inside the library for good, and following the program's
/// credential changes.
fn watcher_start() {
    crate::shim_guard::ShimGuard::enter_forever();
    crate::library_init::prepare_library_thread();
}

/// Takes the requests whose completions every context's ring shows since the last look.
fn look_all(events: &mut Vec<IoEvent>) -> Vec<(Submitted, Option<i64>)> {
    let mut done = Vec::new();
    for c in table().contexts.iter_mut() {
        c.look(events, &mut done);
    }
    done
}

/// Starts the watcher. If the thread cannot start, says so: pins then end only at reuse and
/// `io_destroy`.
fn start() {
    let started = memvisor_pager::spawn_started("memvisor-aio".into(), watcher_start, || {
        let mut events = Vec::new();
        loop {
            {
                let mut t = table();
                while t.in_flight() == 0 {
                    t = WAKE.wait(t).unwrap_or_else(|e| e.into_inner());
                }
            }
            std::thread::sleep(LOOK_PERIOD);
            for (s, res) in look_all(&mut events) {
                s.complete(res);
            }
        }
    });
    if let Err(e) = started {
        eprintln!("memvisor-preload: cannot start the AIO completion watcher thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aio_request::Iocb;
    use std::time::{Duration, Instant};

    /// A real AIO context and a memfd to write to.
    fn context_and_file() -> (usize, libc::c_int) {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 8 as libc::c_long, &mut ctx) };
        assert_eq!(r, 0, "io_setup: {}", std::io::Error::last_os_error());
        // SAFETY: memfd_create takes a NUL-terminated name and flags.
        let fd = unsafe { libc::memfd_create(c"aio-in-flight".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        (ctx as usize, fd)
    }

    /// A write of `data` to `fd` at 0, begun on `image` as `image_io::start_change` does.
    fn write(fd: libc::c_int, data: &[u8], image: &Arc<ImageFile>) -> (Box<Iocb>, Submitted) {
        let cb = Box::new(Iocb {
            aio_lio_opcode: 1,
            aio_fildes: fd as u32,
            aio_buf: data.as_ptr() as u64,
            aio_nbytes: data.len() as u64,
            ..Iocb::default()
        });
        image.begin_write();
        let s = Submitted {
            iocb: &*cb as *const Iocb as usize,
            pins: DirectIoReads::default(),
            read: None,
            write: Some(image.clone()),
        };
        (cb, s)
    }

    fn submit(ctx: usize, cb: &Iocb) {
        let mut list = [cb as *const Iocb as *mut libc::c_void];
        // SAFETY: one valid control block whose buffer outlives its completion (waited for).
        let n = unsafe { crate::raw_calls::io_submit(ctx as libc::c_ulong, 1, list.as_mut_ptr()) };
        assert_eq!(n, 1, "io_submit: {}", std::io::Error::last_os_error());
    }

    /// Whether the image has no write in flight.
    fn ended(image: &ImageFile) -> bool {
        image.read_epoch().is_some()
    }

    #[test]
    fn a_request_ends_when_its_completion_shows_in_the_ring_not_before() {
        let (ctx, fd) = context_and_file();
        let image = Arc::new(ImageFile::open_fd(fd).unwrap());
        let data = [3u8; 4096];
        let (cb, s) = write(fd, &data, &image);
        register(ctx, vec![s]);
        // Registered, not submitted: nothing can complete it, however often the rings are read.
        for _ in 0..3 {
            for (s, res) in look_all(&mut Vec::new()) {
                s.complete(res);
            }
            std::thread::sleep(LOOK_PERIOD * 2);
        }
        assert!(!ended(&image), "a write ended before it was submitted");
        submit(ctx, &cb);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended(&image) {
            for (s, res) in look_all(&mut Vec::new()) {
                assert_eq!(res, Some(4096));
                s.complete(res);
            }
            assert!(Instant::now() < deadline, "the completion was never found");
            std::thread::sleep(Duration::from_millis(1));
        }
        finish_destroyed(destroying(ctx));
        assert_eq!(crate::raw_calls::io_destroy(ctx as libc::c_ulong), 0);
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn withdrawn_reused_and_destroyed_requests_end_without_a_result() {
        let (ctx, fd) = context_and_file();
        let image = Arc::new(ImageFile::open_fd(fd).unwrap());
        let data = [5u8; 512];
        // Not submitted after all.
        let (cb, s) = write(fd, &data, &image);
        register(ctx, vec![s]);
        assert!(!ended(&image));
        withdraw(ctx, &[&*cb as *const Iocb as usize]);
        assert!(ended(&image));
        // The same block registered again while the library holds it: the first request is
        // done (a program reuses a block once its request completed).
        let (cb, first) = write(fd, &data, &image);
        register(ctx, vec![first]);
        image.begin_write();
        let again = Submitted {
            iocb: &*cb as *const Iocb as usize,
            pins: DirectIoReads::default(),
            read: None,
            write: Some(image.clone()),
        };
        register(ctx, vec![again]);
        assert!(!ended(&image), "the second request is still held");
        // Destroyed with the second held: it ends once the real io_destroy has returned. Had
        // the first not ended at the reuse, the image would still have a write in flight.
        let held = destroying(ctx);
        assert_eq!(held.len(), 1);
        assert!(!ended(&image));
        finish_destroyed(held);
        assert!(
            ended(&image),
            "the reused block's first request never ended"
        );
        assert_eq!(crate::raw_calls::io_destroy(ctx as libc::c_ulong), 0);
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(fd) };
    }
}
