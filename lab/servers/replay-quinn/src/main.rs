//! qreplay's quinn 0.11 client and server (lab_server_common::replay): the replay protocol (downloads,
//! uploads, many requests on one connection) over quinn's tokio runtime, with rustls (ring) for TLS.

mod client;
mod config;
mod h3;
mod server;

use lab_server_common::replay::{self, Role};

fn main() {
    let cli = replay::start();
    // One thread: quinn does each connection's work in one task anyway, and on the testbed's two cores
    // the other belongs to the peer.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match cli.role {
        Role::Server(args) => runtime.block_on(server::run(args)),
        Role::Client(args) => runtime.block_on(client::run(args)),
        Role::StreamClient(args) => runtime.block_on(client::run_stream(args)),
    }
}
