//! Control and observation of processes running under memvisor.
//!
//! Each managed process (a program started by `memvisor run`, with the preload library in it)
//! serves a Unix socket at `DIR/PID.sock` ([`socket_dir`]; DIR is `/run/memvisor` for root,
//! a private per-user directory otherwise, always a real directory of mode 0700 owned by the
//! user; the socket is 0600 and only root or the process's own user may talk to it, checked
//! with `SO_PEERCRED`). The [`protocol`] is versioned JSON lines, length-limited: `status`
//! returns a [`ProcessStatus`] (budget, policy, and per-region resident, swapped, faults, I/O),
//! `set` changes the budget and policy at run time, checked by [`SetRules`] on both sides;
//! `migrate`, `migrate_finish` and `migrate_cancel` drive a live migration of the process's
//! guest memory (checked by [`MigrateRules`]; progress in [`ProcessStatus::migration`]).
//! [`ControlClient`] is what `memvisor stat`, `top` and `set` use; [`ControlServer`] runs
//! inside the managed process. [`prometheus::render`] and [`MetricsServer`] expose the same
//! numbers as Prometheus text on loopback (`memvisor run --metrics ADDR`). Both servers serve
//! connections concurrently within [`ConnectionLimits`] (overall and per peer) and give each
//! request one deadline ([`DeadlineStream`]); a full server answers "busy" (HTTP 503). The
//! environment `memvisor run` hands to the preload library is named in [`launch_env`].

pub mod byte_size;
mod connection_limits;
mod control_client;
mod control_error;
mod control_server;
mod deadline_stream;
pub mod duration;
pub mod host_memory;
pub mod http_request;
pub mod interrupt;
pub mod launch_env;
mod metrics_server;
mod migrate_rules;
mod migration_status;
mod peer_credentials;
mod post_copy;
mod process_state;
mod process_status;
pub mod prometheus;
pub mod protocol;
mod set_rules;
pub mod socket_dir;
mod unix_connect;

pub use byte_size::{format_bytes, ByteSize};
pub use connection_limits::{ConnectionLimits, ConnectionSlot, Refusal};
pub use control_client::{ControlClient, SET_TIMEOUT, STATUS_TIMEOUT};
pub use control_error::ControlError;
pub use control_server::{
    ControlHandler, ControlServer, MigrateCommand, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_UID,
    REQUEST_DEADLINE,
};
pub use deadline_stream::{DeadlineStream, TimeoutSocket};
pub use duration::{parse_duration, MAX_DURATION};
pub use http_request::MetricsRequest;
pub use metrics_server::{parse_metrics_addr, MetricsServer};
pub use migrate_rules::{MigrateRules, MAX_DOWNTIME_LIMIT_MS, MIN_BANDWIDTH};
pub use migration_status::MigrationStatus;
pub use peer_credentials::PeerCredentials;
pub use post_copy::{PostCopy, AUTO_POST_COPY_ABOVE};
pub use process_state::ProcessState;
pub use process_status::{ImageStatus, ProcessStatus, RefaultStatus, RegionStatus};
pub use protocol::{Request, Response, PROTOCOL_VERSION};
pub use set_rules::{SetRules, MIN_IMAGE_CACHE_BYTES};
pub use unix_connect::connect_within;
