//! The network side: listening sockets and socket activation, one
//! connection's reader, workers and replies, and the byte and request
//! budgets they share.

pub(crate) mod conn;
pub mod flow;
pub(crate) mod listen;
pub(crate) mod replies;
pub(crate) mod stream;
pub mod systemd;
