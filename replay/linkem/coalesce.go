package main

import "encoding/binary"

// Writing to a tun fd costs a system call and a pass through the receiving
// IP stack per write. Datagrams of one UDP flow that are due together are
// therefore written as one UDP GSO burst (virtio_net_hdr GSO_UDP_L4), which
// the receiving kernel splits at its UDP layer back into the very same
// datagrams (or hands whole to a socket with UDP_GRO, as a NIC's GRO
// would). Each datagram has had its own verdict and due time already: only
// the writes are merged, and only of datagrams due within `early`.

const (
	maxCoalesced = 64    // datagrams per burst; the kernel accepts up to 128
	maxBurst     = 65535 // IP packet length limit of the burst
)

// udpFlow returns the length of the IP+UDP headers of a plain, unfragmented
// UDP datagram without IP options (the only kind merged), or 0.
func udpFlow(pkt []byte) int {
	if len(pkt) < 1 {
		return 0
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) >= 28 && pkt[0] == 0x45 && pkt[9] == 17 && binary.BigEndian.Uint16(pkt[6:8])&0x3fff == 0 {
			return 28
		}
	case 6:
		if len(pkt) >= 48 && pkt[6] == 17 {
			return 48
		}
	}
	return 0
}

// sameFlow says whether two datagrams (headers of length hl) may share a
// burst: same addresses, ports and per-packet IP fields the segmentation
// copies from the first (IPv4 TOS, TTL, DF; IPv6 class, label, hop limit).
func sameFlow(a, b []byte, hl int) bool {
	if len(b) < hl || udpFlow(b) != hl {
		return false
	}
	if hl == 28 {
		return a[1] == b[1] && a[6]&0x40 == b[6]&0x40 && a[8] == b[8] &&
			string(a[12:20]) == string(b[12:20]) && string(a[20:24]) == string(b[20:24])
	}
	return string(a[0:4]) == string(b[0:4]) && a[7] == b[7] && string(a[8:44]) == string(b[8:44])
}

// coalesce writes into out (room for maxFrame) one burst made of frames[0]
// and as many following frames as fit (same flow, equal payload sizes, a
// shorter one only last) and returns the burst's length and how many
// frames it took; (0, 1) when frames[0] goes out as it is.
func coalesce(out []byte, frames [][]byte) (n, used int) {
	first := frames[0]
	if len(first) < vnetHdrLen || first[1] != vnetGSONone {
		return 0, 1
	}
	pkt := first[vnetHdrLen:]
	hl := udpFlow(pkt)
	size := len(pkt) - hl
	if hl == 0 || size == 0 {
		return 0, 1
	}
	used = 1
	total := len(pkt)
	for used < len(frames) && used < maxCoalesced {
		f := frames[used]
		if len(f) < vnetHdrLen || f[1] != vnetGSONone {
			break
		}
		next := f[vnetHdrLen:]
		payload := len(next) - hl
		if payload <= 0 || payload > size || total+payload > maxBurst || !sameFlow(pkt, next, hl) {
			break
		}
		used++
		total += payload
		if payload < size {
			break // a shorter datagram can only be the last of a burst
		}
	}
	if used == 1 {
		return 0, 1
	}
	n = copy(out, first)
	for _, f := range frames[1:used] {
		n += copy(out[n:], f[vnetHdrLen+hl:])
	}
	burst := out[vnetHdrLen:n]
	udpLen := len(burst) - (hl - 8)
	out[0] = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM: the receiver trusts the payload sums
	out[1] = vnetGSOUDPL4
	binary.LittleEndian.PutUint16(out[2:4], uint16(hl))   // hdr_len
	binary.LittleEndian.PutUint16(out[4:6], uint16(size)) // gso_size
	binary.LittleEndian.PutUint16(out[6:8], uint16(hl-8)) // csum_start: the UDP header
	binary.LittleEndian.PutUint16(out[8:10], 6)           // csum_offset: its checksum
	var sum uint32
	if hl == 28 {
		binary.BigEndian.PutUint16(burst[2:4], uint16(len(burst)))
		burst[10], burst[11] = 0, 0
		binary.BigEndian.PutUint16(burst[10:12], ^fold(addWords(0, burst[:20])))
		sum = addWords(0, burst[12:20])
	} else {
		binary.BigEndian.PutUint16(burst[4:6], uint16(udpLen))
		sum = addWords(0, burst[8:40])
	}
	udp := burst[hl-8:]
	binary.BigEndian.PutUint16(udp[4:6], uint16(udpLen))
	// A partial checksum holds the pseudo-header sum, not complemented; the
	// segmentation adjusts it for each datagram's own length.
	sum += 17 + uint32(udpLen)
	binary.BigEndian.PutUint16(udp[6:8], fold(sum))
	return n, used
}

func addWords(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	return sum
}

func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}
