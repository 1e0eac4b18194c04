//! Asynchronous I/O requests in flight: what the library did when the program submitted them
//! (QEMU's `aio=native` through `io_submit`, [`crate::aio_entry_points`]; `aio=io_uring`
//! through liburing's `io_uring_submit`, [`crate::uring_entry_points`]) and must finish when
//! the kernel completes them.
//!
//! A read into managed memory holds its chunks pinned against eviction until it completes
//! (with `O_DIRECT` the device writes into the pages the kernel pinned, and an eviction
//! meanwhile would punch them from the region's memfd); a read of an image into guest RAM had
//! the false-read preventer run before it and gets its association after it, if complete; a
//! write to an image began a write ([`ImageFile::begin_write`]) that must end.
//!
//! The kernel completes these requests without a library call. The library finds the
//! completions in each context's completion ring ([`CompletionRing`]: the AIO context's
//! ring, [`AioRing`](memvisor_io_rings::AioRing), or an io_uring's completion queue): a
//! watcher thread looks every [`LOOK_PERIOD`] while requests are in flight (and sleeps
//! otherwise), and each submission looks at its context first. Requests are known by a key: the control block's address for
//! AIO, whose reuse means its request completed (a program reuses a block only once its
//! request is done: it is finished then, without its result), and the entry's `user_data` for
//! io_uring, which several requests in flight may share (a completion then finishes one of
//! them without its result, and its pins and write wait for the last of them). Tearing a
//! context down (`io_destroy`, which waits for its requests; `io_uring_queue_exit`, after which
//! no completion is ever delivered) finishes its requests without results. A ring that cannot
//! be read leaves only these ways: pins are then held longer, which costs memory over the
//! budget, never data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use memvisor_io_rings::{Completion, CompletionRing};
use memvisor_pager::ImageFile;

use crate::direct_io_reads::DirectIoReads;
use crate::image_io::PendingRead;

/// How often the watcher looks at the rings while requests are in flight.
pub const LOOK_PERIOD: Duration = Duration::from_millis(2);

/// The kind of a context: how its requests are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextKind {
    /// Linux AIO: keys are control block addresses, and a key submitted again was completed.
    Aio,
    /// io_uring: keys are `user_data`, which requests in flight may share.
    Uring,
}

impl ContextKind {
    fn name(self) -> &'static str {
        match self {
            Self::Aio => "AIO context",
            Self::Uring => "io_uring",
        }
    }
}

/// What the library did at one request's submission.
pub struct Submitted {
    /// The request's key.
    pub key: u64,
    /// The managed chunks its buffers touch, pinned.
    pub pins: DirectIoReads,
    /// A read of an image into guest RAM, started.
    pub read: Option<PendingRead>,
    /// A write to an image, begun.
    pub write: Option<Arc<ImageFile>>,
    /// Requests with the same key that completed before this one, waiting for it.
    waiting: Vec<Submitted>,
}

impl Submitted {
    /// What the library did for the request with key `key`.
    pub fn new(
        key: u64,
        pins: DirectIoReads,
        read: Option<PendingRead>,
        write: Option<Arc<ImageFile>>,
    ) -> Self {
        Self {
            key,
            pins,
            read,
            write,
            waiting: Vec::new(),
        }
    }

    /// Whether anything waits for the request's completion.
    pub fn needs_completion(&self) -> bool {
        !self.pins.is_empty() || self.read.is_some() || self.write.is_some()
    }

    /// The request completed with result `res` (bytes or a negative errno; `None`: not known):
    /// a complete read is associated, a write ends, the pins go (and so do those of the
    /// requests that waited for it).
    fn complete(self, res: Option<i64>) {
        if let (Some(read), Some(res)) = (&self.read, res) {
            read.finish(isize::try_from(res).unwrap_or(-1), 0);
        }
        if let Some(image) = &self.write {
            image.end_write();
        }
        for w in self.waiting {
            w.complete(None);
        }
        drop(self.pins);
    }
}

/// One context's requests in flight.
struct Context {
    /// Its id (AIO: the ring's address; io_uring: its completion queue tail's).
    id: usize,
    kind: ContextKind,
    /// Its completions (`None`: unreadable).
    ring: Option<Box<dyn CompletionRing>>,
    requests: Vec<Submitted>,
}

impl Context {
    /// Moves the requests whose completions the ring shows since the last look into `done`.
    fn look(&mut self, events: &mut Vec<Completion>, done: &mut Vec<(Submitted, Option<i64>)>) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        events.clear();
        let read = ring.completions(events);
        for e in events.iter() {
            let Some(i) = self.requests.iter().position(|s| s.key == e.key) else {
                continue;
            };
            let s = self.requests.swap_remove(i);
            match self.requests.iter_mut().find(|o| o.key == e.key) {
                // Another request shares the key: which one completed is not known. One is
                // done without its result; what it holds waits for the other.
                Some(other) => {
                    let mut s = s;
                    s.read = None;
                    other.waiting.push(s);
                }
                None => done.push((s, Some(e.res))),
            }
        }
        if ring.lost() > 0 {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "memvisor-preload: completions of {} {:#x} were overwritten before the \
                     library read them; their requests stay held until the ring is torn down",
                    self.kind.name(),
                    self.id
                );
            }
        }
        if let Err(e) = read {
            eprintln!(
                "memvisor-preload: the completion ring of {} {:#x} cannot be read ({e}); its \
                 requests' pins now end only when the context is torn down",
                self.kind.name(),
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

    /// The context `id`, known from now on if it was not (its ring made by `ring`).
    fn context(
        &mut self,
        id: usize,
        kind: ContextKind,
        ring: impl FnOnce() -> Option<Box<dyn CompletionRing>>,
    ) -> &mut Context {
        let i = match self.contexts.iter().position(|c| c.id == id) {
            Some(i) => i,
            None => {
                self.contexts.push(Context {
                    id,
                    kind,
                    ring: ring(),
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

/// Requests of context `ctx` (of `kind`, its completions read through what `ring` makes the
/// first time) about to be submitted: before the system call, so that no completion can come
/// before the library knows the request. Completions already in the ring are taken first; for
/// AIO, a control block still held as in flight is finished as reused.
pub fn register(
    ctx: usize,
    kind: ContextKind,
    ring: impl FnOnce() -> Option<Box<dyn CompletionRing>>,
    requests: Vec<Submitted>,
) {
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
        let c = t.context(ctx, kind, ring);
        c.look(&mut Vec::new(), &mut done);
        for s in requests {
            if kind == ContextKind::Aio {
                if let Some(i) = c.requests.iter().position(|o| o.key == s.key) {
                    done.push((c.requests.swap_remove(i), None));
                }
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

/// The requests `keys` of context `ctx` were not submitted after all (`io_submit` failed or
/// took fewer): finished without a result.
pub fn withdraw(ctx: usize, keys: &[u64]) {
    let mut gone = Vec::new();
    {
        let mut t = table();
        if let Some(c) = t.contexts.iter_mut().find(|c| c.id == ctx) {
            for &k in keys {
                if let Some(i) = c.requests.iter().position(|s| s.key == k) {
                    gone.push(c.requests.swap_remove(i));
                }
            }
        }
    }
    finish_without_results(gone);
}

/// Context `ctx` is about to be torn down: it is forgotten (its ring is not read again), and
/// the requests it held are returned, to be finished by [`finish_without_results`] once the real
/// call (`io_destroy`, `io_uring_queue_exit`) returned.
pub fn destroying(ctx: usize) -> Vec<Submitted> {
    let mut t = table();
    match t.contexts.iter().position(|c| c.id == ctx) {
        Some(i) => t.contexts.swap_remove(i).requests,
        None => Vec::new(),
    }
}

/// Finishes `requests` without results (withdrawn, or of a torn-down context).
pub fn finish_without_results(requests: Vec<Submitted>) {
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
fn look_all(events: &mut Vec<Completion>) -> Vec<(Submitted, Option<i64>)> {
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
    use memvisor_io_rings::{AioRing, IoRingsResult, Iocb};
    use std::time::Instant;

    /// A real AIO context and a memfd to write to.
    fn context_and_file() -> (usize, libc::c_int) {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 8 as libc::c_long, &mut ctx) };
        assert_eq!(r, 0, "io_setup: {}", std::io::Error::last_os_error());
        (ctx as usize, memfd())
    }

    fn memfd() -> libc::c_int {
        // SAFETY: memfd_create takes a NUL-terminated name and flags.
        let fd = unsafe { libc::memfd_create(c"aio-in-flight".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        fd
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
        let key = &*cb as *const Iocb as u64;
        (cb, begun(key, image))
    }

    /// A request with key `key` that began a write on `image`.
    fn begun(key: u64, image: &Arc<ImageFile>) -> Submitted {
        image.begin_write();
        Submitted::new(key, DirectIoReads::default(), None, Some(image.clone()))
    }

    fn register_aio(ctx: usize, s: Submitted) {
        register(ctx, ContextKind::Aio, || AioRing::boxed(ctx), vec![s]);
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

    fn finish(done: Vec<(Submitted, Option<i64>)>) {
        for (s, res) in done {
            s.complete(res);
        }
    }

    #[test]
    fn a_request_ends_when_its_completion_shows_in_the_ring_not_before() {
        let (ctx, fd) = context_and_file();
        let image = Arc::new(ImageFile::open_fd(fd).unwrap());
        let data = [3u8; 4096];
        let (cb, s) = write(fd, &data, &image);
        register_aio(ctx, s);
        // Registered, not submitted: nothing can complete it, however often the rings are read.
        for _ in 0..3 {
            finish(look_all(&mut Vec::new()));
            std::thread::sleep(LOOK_PERIOD * 2);
        }
        assert!(!ended(&image), "a write ended before it was submitted");
        submit(ctx, &cb);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended(&image) {
            let done = look_all(&mut Vec::new());
            assert!(done.iter().all(|(_, res)| *res == Some(4096)));
            finish(done);
            assert!(Instant::now() < deadline, "the completion was never found");
            std::thread::sleep(Duration::from_millis(1));
        }
        finish_without_results(destroying(ctx));
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
        register_aio(ctx, s);
        assert!(!ended(&image));
        withdraw(ctx, &[&*cb as *const Iocb as u64]);
        assert!(ended(&image));
        // The same block registered again while the library holds it: the first request is
        // done (a program reuses a block only once its request completed).
        let (cb, first) = write(fd, &data, &image);
        register_aio(ctx, first);
        register_aio(ctx, begun(&*cb as *const Iocb as u64, &image));
        assert!(!ended(&image), "the second request is still held");
        // Destroyed with the second held: it ends once the real io_destroy has returned. Had
        // the first not ended at the reuse, the image would still have a write in flight.
        let held = destroying(ctx);
        assert_eq!(held.len(), 1);
        assert!(!ended(&image));
        finish_without_results(held);
        assert!(
            ended(&image),
            "the reused block's first request never ended"
        );
        assert_eq!(crate::raw_calls::io_destroy(ctx as libc::c_ulong), 0);
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(fd) };
    }

    /// A completion ring the test fills.
    struct TestRing(Arc<Mutex<Vec<Completion>>>);

    impl CompletionRing for TestRing {
        fn completions(&mut self, out: &mut Vec<Completion>) -> IoRingsResult<()> {
            out.append(&mut self.0.lock().unwrap());
            Ok(())
        }
    }

    /// io_uring keys (`user_data`) may be shared by requests in flight: a completion of a
    /// shared key ends nothing until the last request with that key completed, and a key seen
    /// again is not a reuse.
    #[test]
    fn requests_sharing_a_key_end_together_with_the_last() {
        // A context id no real ring has (the test's own allocation).
        let id = Box::new(0u8);
        let ctx = &*id as *const u8 as usize;
        let posted = Arc::new(Mutex::new(Vec::new()));
        let ring = || Some(Box::new(TestRing(posted.clone())) as Box<dyn CompletionRing>);
        let fd = memfd();
        let a = Arc::new(ImageFile::open_fd(fd).unwrap());
        let fd2 = memfd();
        let b = Arc::new(ImageFile::open_fd(fd2).unwrap());
        register(ctx, ContextKind::Uring, ring, vec![begun(7, &a)]);
        register(ctx, ContextKind::Uring, ring, vec![begun(7, &b)]);
        assert!(!ended(&a) && !ended(&b), "a shared key taken for a reuse");
        // (The watcher may take a completion first: what was posted is then gone from the
        // test ring, and finished by whichever thread took it.)
        posted.lock().unwrap().push(Completion { key: 7, res: 512 });
        finish(look_all(&mut Vec::new()));
        std::thread::sleep(LOOK_PERIOD * 4);
        assert!(posted.lock().unwrap().is_empty());
        assert!(
            !ended(&a) && !ended(&b),
            "one completion of a shared key ended a request"
        );
        posted.lock().unwrap().push(Completion { key: 7, res: 512 });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(ended(&a) && ended(&b)) {
            finish(look_all(&mut Vec::new()));
            assert!(
                Instant::now() < deadline,
                "both completions seen, a write still held"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        finish_without_results(destroying(ctx));
        // SAFETY: the test's own descriptors.
        unsafe {
            libc::close(fd);
            libc::close(fd2);
        }
    }
}
