//! A small, blocking QMP (QEMU Machine Protocol) client, used by `memvisor migrate` to drive a
//! source and a destination QEMU through a device-state-only live migration (capability
//! `x-ignore-shared`: guest RAM is a shared memfd that memvisor moves itself; `return-path`;
//! `pause-before-switchover`, which stops the source in `pre-switchover` until
//! `migrate-continue`).
//!
//! QMP is JSON lines: QEMU greets with `{"QMP": {...}}`, the client answers
//! `{"execute": "qmp_capabilities"}`, then each command `{"execute": NAME, "arguments": {...},
//! "id": N}` gets `{"return": ..., "id": N}` or `{"error": {"class": C, "desc": D}, "id": N}`,
//! and events `{"event": NAME, "data": ..., "timestamp": ...}` may arrive at any time.
//!
//! - [`QmpAddress`]: `unix:PATH`, `tcp:HOST:PORT` or a bare path.
//! - [`QmpClient`]: connect and negotiate, [`QmpClient::execute`] any command (the reply is
//!   matched by id, events read meanwhile are queued: [`QmpClient::take_events`],
//!   [`QmpClient::wait_event`]), and typed helpers for `query-status` ([`RunState`]), the
//!   migration commands and `query-migrate` ([`MigrationInfo`]).
//! - [`parse_reply`]: the pure line decoder into a [`QmpReply`], also fuzzed.
//! - [`QmpError`]: every failure, naming the address, the command, and QEMU's error class and
//!   description.
//!
//! Every wait has a deadline for the whole reply (not per read), a line longer than
//! [`MAX_LINE_BYTES`] is refused without being buffered whole, and bad input never panics.
//! There is no async runtime: one client is one blocking socket.

mod fd_passing;
mod line_reader;
mod migration_info;
mod qmp_address;
mod qmp_client;
mod qmp_error;
mod qmp_event;
mod qmp_reply;
mod qmp_stream;
mod run_state;

pub use migration_info::MigrationInfo;
pub use qmp_address::QmpAddress;
pub use qmp_client::QmpClient;
pub use qmp_error::QmpError;
pub use qmp_event::QmpEvent;
pub use qmp_reply::{parse_reply, QmpReply, MAX_LINE_BYTES};
pub use qmp_stream::connect_tcp;
pub use run_state::RunState;
