//! [`ThreadPoolWriter`]: swap writes on a pool of threads, each a blocking `pwrite`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::event_fd::EventFd;
use crate::thread_start_hook::spawn_pager_thread;
use crate::write_job::{WriteDone, WriteJob};

/// Finished writes, and the eventfd that announces them.
#[derive(Debug)]
struct Finished {
    done: Mutex<Vec<WriteDone>>,
    signal: EventFd,
}

/// A pool of writer threads fed by a queue.
#[derive(Debug)]
pub(crate) struct ThreadPoolWriter {
    jobs: Option<Sender<WriteJob>>,
    finished: Arc<Finished>,
    threads: Vec<JoinHandle<()>>,
}

impl ThreadPoolWriter {
    /// Starts `threads` writers named after `region`.
    pub fn new(region: &str, threads: usize) -> io::Result<Self> {
        let (tx, rx) = channel::<WriteJob>();
        let rx = Arc::new(Mutex::new(rx));
        let finished = Arc::new(Finished {
            done: Mutex::new(Vec::new()),
            signal: EventFd::new()?,
        });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let finished = finished.clone();
            let h = spawn_pager_thread(format!("pager-out-{region}-{i}"), move || {
                writer_loop(&rx, &finished)
            })?;
            handles.push(h);
        }
        Ok(Self {
            jobs: Some(tx),
            finished,
            threads: handles,
        })
    }

    pub fn submit(&mut self, job: WriteJob) {
        let Some(tx) = self.jobs.as_ref() else {
            return self.finish(WriteDone::of(
                &job,
                Err(io::Error::other("page-out writer threads are gone")),
            ));
        };
        if let Err(std::sync::mpsc::SendError(job)) = tx.send(job) {
            // No writer left (cannot happen while the pool lives): report the job failed.
            self.finish(WriteDone::of(
                &job,
                Err(io::Error::other("page-out writer threads are gone")),
            ));
        }
    }

    fn finish(&self, d: WriteDone) {
        finish(&self.finished, d);
    }

    pub fn take_done(&mut self, out: &mut Vec<WriteDone>) {
        self.finished.signal.clear();
        if let Ok(mut d) = self.finished.done.lock() {
            out.append(&mut d);
        }
    }

    pub fn completion_fd(&self) -> RawFd {
        self.finished.signal.as_raw_fd()
    }

    pub fn depth(&self) -> usize {
        self.threads.len()
    }
}

fn finish(f: &Finished, d: WriteDone) {
    if let Ok(mut q) = f.done.lock() {
        q.push(d);
    }
    f.signal.signal();
}

fn writer_loop(rx: &Mutex<Receiver<WriteJob>>, finished: &Finished) {
    loop {
        let job = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else {
            return; // the pool is shutting down
        };
        // SAFETY: per `WriteJob`'s contract, `addr..addr + len` is mapped and nobody writes it
        // until this write is reported done.
        let data = unsafe { std::slice::from_raw_parts(job.addr as *const u8, job.len) };
        let result = job.target.write(data);
        finish(finished, WriteDone::of(&job, result));
    }
}

impl Drop for ThreadPoolWriter {
    fn drop(&mut self) {
        self.jobs = None;
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}
