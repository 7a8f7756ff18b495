//! The datagram side of an endpoint: one non-blocking UDP socket, waits that honour tquic's
//! sub-millisecond timers (its pacer), and receives drained in batches between processing rounds.

use std::cell::RefCell;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lab_server_common::refuse;
use lab_server_common::replay::fail;
use tquic::{Endpoint, PacketInfo, PacketSendHandler};

/// Datagrams read before the endpoint processes them (and answers with ACKs).
const RECEIVE_BATCH: usize = 64;
/// Kernel socket buffers: a sender's burst outruns Linux's default of about 200 KiB.
const SOCKET_BUFFER: libc::c_int = 8 << 20;
/// Longest wait without a timer, so that the caller's `stop` sees its deadline.
const IDLE_WAIT: Duration = Duration::from_millis(50);

pub fn bind(address: SocketAddr) -> (Rc<UdpSocket>, SocketAddr) {
    let socket = UdpSocket::bind(address).unwrap_or_else(|e| refuse(&format!("bind {address}: {e}")));
    socket.set_nonblocking(true).expect("non-blocking socket");
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        // The FORCE variants pass net.core.[rw]mem_max, for root; the plain ones are capped by it.
        if set_socket_option(&socket, force, SOCKET_BUFFER).is_err() {
            let _ = set_socket_option(&socket, plain, SOCKET_BUFFER);
        }
    }
    let local = socket.local_addr().expect("local address");
    (Rc::new(socket), local)
}

fn set_socket_option(socket: &UdpSocket, name: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    let status = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether `socket` became ready for `events` within `timeout` (None: no limit). ppoll, not poll:
/// the timeout has nanoseconds.
fn wait(socket: &UdpSocket, events: libc::c_short, timeout: Option<Duration>) -> bool {
    let mut descriptor = libc::pollfd { fd: socket.as_raw_fd(), events, revents: 0 };
    let timeout = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ });
    let timeout = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    unsafe { libc::ppoll(&mut descriptor, 1, timeout, std::ptr::null()) > 0 }
}

/// Hands the endpoint's packets to the kernel, waiting while the send buffer is full: dropping
/// them there would only make QUIC retransmit.
pub struct Sender(pub Rc<UdpSocket>);

impl PacketSendHandler for Sender {
    fn on_packets_send(&self, packets: &[(Vec<u8>, PacketInfo)]) -> tquic::Result<usize> {
        for (packet, info) in packets {
            while let Err(e) = self.0.send_to(packet, info.dst) {
                match e.kind() {
                    ErrorKind::WouldBlock => {
                        wait(&self.0, libc::POLLOUT, None);
                    }
                    ErrorKind::Interrupted => {}
                    _ => break, // a datagram the kernel refuses is a lost one, QUIC's to repair
                }
            }
        }
        Ok(packets.len())
    }
}

/// When a paced stream (a connection's index, a stream) lets more bytes go: its server stopped asking to write
/// it while its pace let nothing go, and the loop asks again then (tquic has no timer of the application's).
pub type Ticks = Rc<RefCell<Vec<(Instant, u64, u64)>>>;

/// Runs the endpoint until `stop` says so: datagrams in, timers fired (tquic's and `ticks`), packets out.
pub fn run(
    endpoint: &mut Endpoint,
    socket: &UdpSocket,
    local: SocketAddr,
    ticks: &Ticks,
    mut stop: impl FnMut() -> bool,
) {
    let mut datagram = vec![0u8; 65536];
    while !stop() {
        let now = Instant::now();
        let tick = ticks.borrow().iter().map(|(at, ..)| at.saturating_duration_since(now)).min();
        let timeout = endpoint.timeout().into_iter().chain(tick).fold(IDLE_WAIT, Duration::min);
        if wait(socket, libc::POLLIN, Some(timeout)) {
            for _ in 0..RECEIVE_BATCH {
                match socket.recv_from(&mut datagram) {
                    Ok((len, from)) => {
                        let info = PacketInfo { src: from, dst: local, time: Instant::now() };
                        // A datagram the endpoint rejects (not QUIC, unknown connection) is dropped.
                        let _ = endpoint.recv(&mut datagram[..len], &info);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                    Err(e) => fail(&format!("receive: {e}")),
                }
            }
        }
        let now = Instant::now();
        endpoint.on_timeout(now);
        let due: Vec<_> = {
            let mut ticks = ticks.borrow_mut();
            let (due, later) = ticks.drain(..).partition(|(at, ..)| *at <= now);
            *ticks = later;
            due
        };
        for (_, index, stream_id) in due {
            if let Some(conn) = endpoint.conn_get_mut(index) {
                let _ = conn.stream_want_write(stream_id, true); // its server writes what the tick let go
            }
        }
        let _ = endpoint.process_connections();
    }
}
