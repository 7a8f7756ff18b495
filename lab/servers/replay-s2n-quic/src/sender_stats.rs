//! The server's sender statistics, gathered from s2n-quic's event stream and printed as each
//! connection closes.

use std::io::Write;
use std::time::Duration;

use lab_server_common::replay::print_sender_stats;
use s2n_quic::provider::event::{events, ConnectionInfo, ConnectionMeta, Subscriber};

#[derive(Default)]
pub struct SenderStats {
    packets_sent: u64,
    bytes_sent: u64,
    packets_lost: u64,
    bytes_lost: u64,
    min_rtt: Duration,
    smoothed_rtt: Duration,
    congestion_window: u32,
}

pub struct PrintSenderStats;

impl Subscriber for PrintSenderStats {
    type ConnectionContext = SenderStats;

    fn create_connection_context(&mut self, _meta: &ConnectionMeta, _info: &ConnectionInfo) -> SenderStats {
        SenderStats::default()
    }

    fn on_packet_sent(&mut self, stats: &mut SenderStats, _meta: &ConnectionMeta, event: &events::PacketSent) {
        stats.packets_sent += 1;
        stats.bytes_sent += event.packet_len as u64;
    }

    fn on_packet_lost(&mut self, stats: &mut SenderStats, _meta: &ConnectionMeta, event: &events::PacketLost) {
        // A lost MTU probe says the path is narrower than the probe, not that the link dropped data.
        if !event.is_mtu_probe {
            stats.packets_lost += 1;
            stats.bytes_lost += u64::from(event.bytes_lost);
        }
    }

    fn on_recovery_metrics(
        &mut self,
        stats: &mut SenderStats,
        _meta: &ConnectionMeta,
        event: &events::RecoveryMetrics,
    ) {
        stats.min_rtt = event.min_rtt;
        stats.smoothed_rtt = event.smoothed_rtt;
        stats.congestion_window = event.congestion_window;
    }

    fn on_connection_closed(
        &mut self,
        stats: &mut SenderStats,
        _meta: &ConnectionMeta,
        _event: &events::ConnectionClosed,
    ) {
        print_sender_stats(&[
            ("packets_sent", stats.packets_sent as f64),
            ("bytes_sent", stats.bytes_sent as f64),
            ("packets_lost", stats.packets_lost as f64),
            ("bytes_lost", stats.bytes_lost as f64),
            ("min_rtt_ms", stats.min_rtt.as_secs_f64() * 1e3),
            ("smoothed_rtt_ms", stats.smoothed_rtt.as_secs_f64() * 1e3),
            ("congestion_window", f64::from(stats.congestion_window)),
        ]);
        // The runner stops the server right after the download; the line must be out by then.
        let _ = std::io::stdout().flush();
    }
}
