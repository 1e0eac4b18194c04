//! Control and observation of processes running under memvisor.
//!
//! Each managed process (a program started by `memvisor run`, with the preload library in it)
//! serves a Unix socket at `DIR/PID.sock` ([`socket_dir`]; DIR is `/run/memvisor` for root,
//! mode 0700; the socket is 0600 and only root or the process's own user may talk to it,
//! checked with `SO_PEERCRED`). The [`protocol`] is versioned JSON lines, length-limited:
//! `status` returns a [`ProcessStatus`] (budget, policy, and per-region resident, swapped,
//! faults, I/O), `set` changes the budget and policy at run time. [`ControlClient`] is what
//! `memvisor stat`, `top` and `set` use; [`ControlServer`] runs inside the managed process.
//! [`prometheus::render`] and [`MetricsServer`] expose the same numbers as Prometheus text on
//! loopback (`memvisor run --metrics ADDR`). The environment `memvisor run` hands to the
//! preload library is named in [`launch_env`].

pub mod byte_size;
mod control_client;
mod control_error;
mod control_server;
pub mod duration;
pub mod launch_env;
mod metrics_server;
mod peer_credentials;
mod process_status;
pub mod prometheus;
pub mod protocol;
pub mod socket_dir;

pub use byte_size::{format_bytes, ByteSize};
pub use control_client::ControlClient;
pub use control_error::ControlError;
pub use control_server::{ControlHandler, ControlServer};
pub use duration::parse_duration;
pub use metrics_server::{parse_metrics_addr, MetricsServer};
pub use peer_credentials::PeerCredentials;
pub use process_status::{ProcessStatus, RegionStatus};
pub use protocol::{Request, Response, PROTOCOL_VERSION};
