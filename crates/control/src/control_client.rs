//! [`ControlClient`]: talks to one managed process's control socket.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::control_error::ControlError;
use crate::process_status::ProcessStatus;
use crate::protocol::{
    decode_response, encode_request, read_line_limited, Request, Response, MAX_RESPONSE_BYTES,
};
use crate::socket_dir::socket_path;

/// How long to wait for a managed process to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a managed process.
#[derive(Debug)]
pub struct ControlClient {
    pid: u32,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl ControlClient {
    /// Connects to process `pid`'s socket in `dir`.
    pub fn connect(dir: &Path, pid: u32) -> Result<Self, ControlError> {
        let path = socket_path(dir, pid);
        if !path.exists() {
            return Err(ControlError::NoSuchProcess { pid, path });
        }
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| ControlError::Io { op, path, source }
        };
        let stream = UnixStream::connect(&path).map_err(io("connect to"))?;
        stream
            .set_read_timeout(Some(TIMEOUT))
            .map_err(io("set timeout on"))?;
        stream
            .set_write_timeout(Some(TIMEOUT))
            .map_err(io("set timeout on"))?;
        let writer = stream.try_clone().map_err(io("clone"))?;
        Ok(Self {
            pid,
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Sends `request` and returns the status the process answers with.
    pub fn request(&mut self, request: &Request) -> Result<ProcessStatus, ControlError> {
        let pid = self.pid;
        let remote = |message: String| ControlError::Remote { pid, message };
        self.writer
            .write_all(&encode_request(request))
            .map_err(|e| remote(format!("sending request: {e}")))?;
        let line = read_line_limited(&mut self.reader, MAX_RESPONSE_BYTES)
            .map_err(|e| remote(format!("reading answer: {e}")))?
            .ok_or_else(|| remote("closed the connection without answering".into()))?;
        match decode_response(&line).map_err(|e| remote(e.to_string()))? {
            Response::Status { status, .. } => Ok(*status),
            Response::Error { error, .. } => Err(remote(error)),
        }
    }

    /// The process's status.
    pub fn status(&mut self) -> Result<ProcessStatus, ControlError> {
        self.request(&Request::Status)
    }

    /// Sets a new budget and/or policy; returns the new status.
    pub fn set(
        &mut self,
        budget_bytes: Option<u64>,
        policy: Option<String>,
    ) -> Result<ProcessStatus, ControlError> {
        self.request(&Request::Set {
            budget_bytes,
            policy,
        })
    }
}
